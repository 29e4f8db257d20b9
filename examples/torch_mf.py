"""Matrix factorization in PyTorch on MovieLens-100K: the factors live in pskv tables, pulled per
batch by pskv.torch.Embedding; backward pushes their gradients to Adagrad on the servers.

    python examples/torch_mf.py                            # 1 node
    pskv launch -n 2 -- python examples/torch_mf.py        # each node trains on half of the ratings
"""

import argparse

import numpy as np
import torch

import pskv
import pskv.torch
from pskv.data import fetch, ratings

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=15)
p.add_argument("--rank", type=int, default=50)
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--lam", type=float, default=0.1)
p.add_argument("--batch", type=int, default=500)
args = p.parse_args()
torch.set_num_threads(1)

data = ratings.load_inter(fetch("ml-100k", quiet=True) / "ml-100k.inter")
train, test = ratings.split(data, test_fraction=0.1, seed=0)  # the mf app's split
mu = float(train.values.mean())

with pskv.init() as node:
    adagrad = pskv.Adagrad(lr=args.lr)
    node.table("users", data.n_users, args.rank, updater=adagrad, init=pskv.Normal(std=0.1, seed=1))
    node.table("items", data.n_items, args.rank, updater=adagrad, init=pskv.Normal(std=0.1, seed=2))
    node.table("user_bias", data.n_users, 1, updater=adagrad)
    node.table("item_bias", data.n_items, 1, updater=adagrad)
    worker = node.worker()
    U, V, bu, bv = (pskv.torch.Embedding(worker.table(t)) for t in ("users", "items", "user_bias", "item_bias"))
    mine = np.arange(node.rank, len(train), node.num_nodes)  # this node's share of the ratings
    users, items = torch.from_numpy(train.users), torch.from_numpy(train.items)
    values = torch.from_numpy(train.values)
    rng = np.random.default_rng(node.rank)
    for epoch in range(args.epochs):
        sse = 0.0
        for start in range(0, len(mine), args.batch):
            b = torch.from_numpy(mine[start:start + args.batch])
            u, i = U(users[b]), V(items[b])
            pred = mu + (u * i).sum(1) + bu(users[b])[:, 0] + bv(items[b])[:, 0]
            err = pred - values[b]
            (err.square().sum() + args.lam * (u.square().sum() + i.square().sum())).backward()
            sse += float(err.detach().square().sum())
        rng.shuffle(mine)
        for e in (U, V, bu, bv):
            e.wait()
        print(f"node {node.rank} epoch {epoch + 1}: train RMSE {np.sqrt(sse / len(mine)):.4f}", flush=True)
    worker.barrier()  # every node's pushes are in
    if node.rank == 0:
        tu, ti = torch.from_numpy(test.users), torch.from_numpy(test.items)
        with torch.no_grad():
            pred = mu + (U(tu) * V(ti)).sum(1) + bu(tu)[:, 0] + bv(ti)[:, 0]
        rmse = float((pred.clamp(1, 5) - torch.from_numpy(test.values)).square().mean().sqrt())
        print(f"test RMSE {rmse:.4f}", flush=True)
    worker.barrier()
    worker.close()
