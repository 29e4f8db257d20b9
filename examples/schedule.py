"""Model-parallel rounds (pskv.schedule): coordinate descent for least squares, rows sharded over nodes.

    python examples/schedule.py                         # 1 node
    pskv launch -n 2 -- python examples/schedule.py    # 2 nodes: the same rounds, the same beta

Node 0's scheduler thread publishes 4 coordinates per round (cyclic); every node pushes its rows'
partial sums x_j . r and |x_j|^2 for them (RoundSums), and at the next round every node applies
the same exact steps beta_j += x_j . r / |x_j|^2, so all hold the same beta.
"""
import numpy as np
import pskv
import pskv.schedule as schedule

n, p, per_round, epochs = 400, 32, 4, 40
rng = np.random.default_rng(0)  # every node draws the same data and keeps its share of the rows
X = rng.standard_normal((n, p))
beta_true = rng.standard_normal(p)
y = X @ beta_true

with pskv.init() as node:
    rounds = epochs * p // per_round
    sched = schedule.Scheduler(node, "ls", coords=p, per_round=per_round, policy="cyclic")
    schedule.RoundSums.declare(node, "ls-sums", width=2 * per_round)
    sched.start(rounds + 1)                       # node 0: the thread that publishes each round's set
    w = node.worker()
    lo, hi = node.rank * n // node.num_nodes, (node.rank + 1) * n // node.num_nodes
    x, r, beta = X[lo:hi], y[lo:hi].copy(), np.zeros(p)
    sums = schedule.RoundSums(w, "ls-sums", 2 * per_round)
    sched.begin(w)
    previous = None
    for t in range(rounds + 1):
        chosen = sched.take(w, t)                 # round t's coordinates; round t - 1 is done everywhere
        if previous is not None:                  # apply round t - 1 from everybody's sums
            total, k = sums.totals(t - 1), len(previous)
            delta = total[:k] / total[per_round:per_round + k]
            beta[previous] += delta
            r -= x[:, previous] @ delta
        if t == rounds:
            chosen = chosen[:0]                   # (the last round only applies the one before)
        partial = np.zeros(2 * per_round)
        partial[:len(chosen)] = x[:, chosen].T @ r
        partial[per_round:per_round + len(chosen)] = (x[:, chosen] ** 2).sum(axis=0)
        sums.push(t, partial).wait()
        sched.end_round(w)
        previous = chosen
    w.wait_clock(rounds + 2)                      # every node is done before any leaves
    sched.close()
    print(f"node {node.rank}: {rounds} rounds, max |beta - beta_true| = {np.abs(beta - beta_true).max():.1e}")
