"""Node program of tests/cluster/test_schedule_cluster.py: `python schedule_scenarios.py LATE_SECONDS`.

A scheduler and RoundSums on a real cluster, node 0 late to node.run() by LATE_SECONDS (as a loaded
machine makes it, after the last collective): every worker pushes 1 per round, and at each take the
previous round's totals must count every worker of the cluster, node 0's included.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import pskv
from pskv import schedule

ROUNDS = 6


def main() -> None:
    late = float(sys.argv[1])
    with pskv.init() as node:
        sched = schedule.Scheduler(node, "late", coords=8, per_round=2, policy="cyclic")
        schedule.RoundSums.declare(node, "late-sums", 1)
        node.table("late-last", rows=1, dim=1)  # the last collective before node.run
        sched.start(ROUNDS)
        if node.rank == 0:
            time.sleep(late)
        workers = node.num_nodes * node.config.threads
        seen = []

        def work(w):
            sums = schedule.RoundSums(w, "late-sums", 1)
            sched.begin(w)
            for t in range(ROUNDS):
                sched.take(w, t, timeout=60)
                if t:
                    seen.append((t - 1, int(sums.totals(t - 1)[0])))
                sums.push(t, np.ones(1)).wait()
                sched.end_round(w)

        node.run(work)
        sched.close(timeout=60)
        wrong = [(t, got) for t, got in seen if got != workers]
        print(f"rounds {len(seen)} wrong {wrong} workers {workers} node={node.rank}", flush=True)


if __name__ == "__main__":
    main()
