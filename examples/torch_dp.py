"""Train a torch model data-parallel through pskv: the servers run SGD with momentum.

    python examples/torch_dp.py                      # 1 node
    pskv launch -n 2 -- python examples/torch_dp.py  # 2 nodes: each takes half of every batch
"""

import torch

import pskv
import pskv.torch

torch.set_num_threads(1)  # one compute thread per worker process
torch.manual_seed(0)
x = torch.randn(512, 10)
y = (x[:, :5].sum(1) > 0).long()  # a separable toy task
model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))

with pskv.init() as node:
    dp = pskv.torch.DataParallel(model, node, mode="sync", updater=pskv.SGD(lr=0.1, momentum=0.9))
    share = 64 // dp.workers  # a global batch of 64, split over the workers
    for epoch in range(3):
        for start in range(0, len(x), 64):
            mine = slice(start + node.rank * share, start + (node.rank + 1) * share)
            torch.nn.functional.cross_entropy(dp(x[mine]), y[mine]).backward()
            dp.step()  # pushes done, fresh weights in model's parameters, gradients zeroed
        accuracy = (model(x).argmax(1) == y).float().mean().item()
        print(f"node {node.rank} epoch {epoch}: accuracy {accuracy:.3f}")
    dp.close()
