"""The demo: matrix factorization on generated ratings, 2 local nodes x 2 worker threads.

    pskv demo                      # what `make demo` runs
    pskv demo --nodes 3 --threads 2 --epochs 12

The front process starts the nodes with pskv.launch and turns their progress lines into a
progress bar and a per-epoch table. Each node generates the same seeded data set (a rank-8
matrix plus noise), trains on the users of its range, keeps user factors in its worker threads
and item factors in a pskv table with a server-side Adagrad updater (Lapse's MF layout), and
reports train/test RMSE through a second table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numba
import numpy as np

_TAG = "@@pskv-demo "  # prefix of the machine-readable lines the nodes print


def _parse(argv):
    p = argparse.ArgumentParser(prog="pskv demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--users", type=int, default=10_000)
    p.add_argument("--items", type=int, default=5_000)
    p.add_argument("--ratings", type=int, default=1_000_000)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--batch", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--node", action="store_true", help=argparse.SUPPRESS)  # set on the node processes
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.node:
        _node_main(args)
        return 0
    return _front(args, [a for a in (sys.argv[1:] if argv is None else argv)])


# ---- front process: launch, show progress, summarise -------------------------------------------
def _front(args, argv) -> int:
    from tqdm import tqdm

    from .launch import start_local

    print(f"pskv demo: matrix factorization, {args.ratings:,} ratings of {args.users:,} users x {args.items:,} items "
          f"(rank {args.rank} + noise 0.1), {args.nodes} nodes x {args.threads} threads, {args.epochs} epochs",
          flush=True)
    command = [sys.executable, "-m", "pskv.demo", "--node", *argv]
    start = time.monotonic()
    epochs = []
    with start_local(args.nodes, command, threads=args.threads) as cluster:
        bar = tqdm(total=args.epochs * args.ratings * 0.9, unit="ratings", unit_scale=True, smoothing=0.1,
                   desc="training", dynamic_ncols=True)
        seen = 0
        status = None
        while status is None:
            try:
                status = cluster.wait(timeout=0.2)
            except TimeoutError:
                pass
            lines = cluster.output(0).splitlines()
            for line in lines[seen:]:
                if _TAG not in line:
                    continue
                msg = json.loads(line.split(_TAG, 1)[1])
                if msg["kind"] == "progress":
                    bar.update(msg["ratings"] - bar.n)
                elif msg["kind"] == "epoch":
                    epochs.append(msg)
                    bar.write(f"epoch {msg['epoch']:>2}  train RMSE {msg['train_rmse']:.4f}  "
                              f"test RMSE {msg['test_rmse']:.4f}  ({msg['seconds']:.1f} s)")
            seen = len(lines)
        if status == 0:
            bar.update(bar.total - bar.n)
        bar.close()
        if status != 0:
            print(f"pskv demo failed (status {status}); last lines of the nodes:\n{cluster.logs_tail()}",
                  file=sys.stderr)
            return status
    wall = time.monotonic() - start
    last = epochs[-1]
    rate = args.epochs * args.ratings * 0.9 / max(last["seconds_total"], 1e-9)
    print(f"\nsummary: {args.nodes} nodes x {args.threads} threads, {len(epochs)} epochs in {wall:.1f} s "
          f"(training {last['seconds_total']:.1f} s, {rate:,.0f} ratings/s)")
    print(f"baseline (predict the mean rating): test RMSE {last['baseline_rmse']:.4f}; noise floor 0.1000")
    print(f"train RMSE {last['train_rmse']:.4f}")
    print(f"test RMSE {last['test_rmse']:.4f}")
    return 0


# ---- node processes ----------------------------------------------------------------------------
def _data(args):
    """The same seeded ratings on every node: (users, items, ratings) for train and test."""
    rng = np.random.default_rng(args.seed)
    u_true = rng.normal(0, 1 / np.sqrt(np.sqrt(args.rank)), (args.users, args.rank))
    v_true = rng.normal(0, 1 / np.sqrt(np.sqrt(args.rank)), (args.items, args.rank))
    users = rng.integers(0, args.users, args.ratings)
    items = rng.zipf(1.3, args.ratings) % args.items  # skewed item popularity, as in real ratings
    r = np.einsum("ij,ij->i", u_true[users], v_true[items]) + rng.normal(0, 0.1, args.ratings)
    test = rng.random(args.ratings) < 0.1
    return (users[~test], items[~test], r[~test]), (users[test], items[test], r[test])


@numba.njit(nogil=True, cache=True)
def _sgd_batch(U, users, V, ratings, lr, lam, grad_v):
    """SGD on user rows U (local) and gradients for the pulled item rows V; returns the squared error."""
    sse = 0.0
    k = U.shape[1]
    for j in range(users.shape[0]):
        u = users[j]
        e = ratings[j]
        for c in range(k):
            e -= U[u, c] * V[j, c]
        sse += e * e
        for c in range(k):
            uc = U[u, c]
            grad_v[j, c] = -e * uc + lam * V[j, c]
            U[u, c] += lr * (e * V[j, c] - lam * uc)
    return sse


@numba.njit(nogil=True, cache=True)
def _sse(U, users, V, ratings):
    sse = 0.0
    for j in range(users.shape[0]):
        e = ratings[j]
        for c in range(U.shape[1]):
            e -= U[users[j], c] * V[j, c]
        sse += e * e
    return sse


def _node_main(args) -> None:
    import pskv

    node = pskv.init()
    train, test = _data(args)
    node.table("items", rows=args.items, dim=args.rank, updater=pskv.Adagrad(lr=0.1, initial_accumulator=0.1),
               init=pskv.Normal(std=0.1, seed=args.seed))
    metrics = node.table("metrics", rows=4, dim=1, dtype="float64")  # train sse, train n, test sse, test n
    workers = node.num_nodes * node.config.threads
    baseline = float(np.sqrt(np.mean((test[2] - train[2].mean()) ** 2)))
    t0 = time.monotonic()

    def work(w: pskv.Worker) -> None:
        me = w.rank * node.config.threads + w.thread
        mine = lambda part: [a[part[0] % workers == me] for a in (part[0], part[1], part[2])]  # noqa: E731
        (tu, ti, tr), (su, si, sr) = mine(train), mine(test)
        U = np.random.default_rng([args.seed, me]).normal(0, 0.1, (args.users, args.rank)).astype(np.float32)
        items, m = w.table("items"), w.table("metrics")
        grad = np.empty((args.batch, args.rank), np.float32)
        done = 0
        for epoch in range(1, args.epochs + 1):
            t_epoch = time.monotonic()
            order = np.random.default_rng([args.seed, me, epoch]).permutation(len(tu))
            sse = 0.0
            for lo in range(0, len(order), args.batch):
                b = order[lo:lo + args.batch]
                V = items.pull(ti[b])  # (batch, rank) float32
                sse += _sgd_batch(U, tu[b], V, tr[b], 0.05, 0.02, grad[:len(b)])
                items.push(ti[b], grad[:len(b)])
                done += len(b)
                if w.thread == 0 and w.rank == 0 and (lo // args.batch) % 10 == 0:
                    _say(kind="progress", ratings=done * workers)
            test_sse = _sse(U, su, items.pull(si), sr)
            m.push(np.arange(4), [[sse], [len(tu)], [test_sse], [len(su)]])
            w.barrier()
            if me == 0:
                s = m.pull(np.arange(4))[:, 0]
                m.set(np.arange(4), np.zeros((4, 1))).wait()
                _say(kind="epoch", epoch=epoch, train_rmse=float(np.sqrt(s[0] / s[1])),
                     test_rmse=float(np.sqrt(s[2] / s[3])), baseline_rmse=baseline,
                     seconds=time.monotonic() - t_epoch, seconds_total=time.monotonic() - t0)
            w.barrier()

    node.run(work)
    node.shutdown()


def _say(**msg) -> None:
    print(_TAG + json.dumps(msg), flush=True)


if __name__ == "__main__":
    sys.exit(main())
