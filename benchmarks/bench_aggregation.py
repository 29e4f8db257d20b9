"""Two-level aggregation benchmark: bytes and messages sent, NodeAggregate table vs. plain table.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_aggregation.py            # ~30 s
    PYTHONPATH=src .venv/bin/python benchmarks/bench_aggregation.py --quick    # ~10 s

Workload (2 nodes x 2 threads, the same for every variant): at each step every worker pushes a
gradient for the same BATCH keys (drawn per step, spread over both nodes' ranges) and then pulls
those keys, mshadow-ps's Push/PullReq pattern. Variants:
  plain      : a plain table (Async): every thread sends its own push and pull to each owner
  agg-bsp    : NodeAggregate, level 2 BSP: one sum per node, owner, round; the owner answers with the rows
  agg-async  : NodeAggregate, level 2 Async
Bytes and messages are the nodes' `stats()` counters (both nodes, everything they sent, also
coordinator traffic) between two barriers around the steps. Level 1 should cut them by about
the number of threads per node (2 here).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

ROWS, DIM, BATCH = 8192, 64, 2048
VARIANTS = ("plain", "agg-bsp", "agg-async")
_TAG = "@@bench "


def node_main(variant: str, steps: int) -> None:
    import pskv

    node = pskv.init()
    kw = {} if variant == "plain" else {"aggregate": pskv.NodeAggregate(),
                                        "consistency": pskv.BSP() if variant == "agg-bsp" else pskv.Async()}
    node.table("w", rows=ROWS, dim=DIM, **kw)

    def work(w: pskv.Worker) -> None:
        t = w.table("w")
        grad = np.full((BATCH, DIM), 1.0, np.float32)  # (BATCH, DIM)
        w.barrier()
        before, start = node.stats(), time.perf_counter()
        for step in range(steps):
            keys = np.sort(np.random.default_rng(step).choice(ROWS, BATCH, replace=False))
            t.push(keys, grad)
            t.pull(keys, timeout=60)
        w.wait_all()
        w.barrier()
        seconds = time.perf_counter() - start
        if w.thread == 0:
            after = node.stats()
            print(_TAG + json.dumps({"rank": node.rank, "seconds": seconds,
                                     "bytes": after["bytes_sent"] - before["bytes_sent"],
                                     "messages": after["messages_sent"] - before["messages_sent"]}), flush=True)

    node.run(work)
    node.shutdown()


def run_variant(variant: str, steps: int) -> dict:
    from pskv.launch import start_local

    cmd = [sys.executable, __file__, "--node", variant, "--steps", str(steps)]
    with start_local(2, cmd, threads=2) as cluster:
        if cluster.wait(timeout=600) != 0:
            raise SystemExit(f"{variant} failed:\n{cluster.logs_tail()}")
        rows = [json.loads(line.split(_TAG, 1)[1]) for r in range(2)
                for line in cluster.output(r).splitlines() if _TAG in line]
    return {"bench": "aggregation", "variant": variant, "nodes": 2, "threads": 2, "steps": steps,
            "rows": ROWS, "dim": DIM, "batch": BATCH, "seconds": max(r["seconds"] for r in rows),
            "mbytes_sent": sum(r["bytes"] for r in rows) / 1e6, "messages_sent": sum(r["messages"] for r in rows)}


def run(quick: bool) -> list[dict]:
    """Run every variant; each result dict also has `bytes_ratio`/`messages_ratio` = plain / this variant."""
    steps = 30 if quick else 150
    results = [run_variant(v, steps) for v in VARIANTS]
    plain = results[0]
    for r in results:
        r["bytes_ratio"] = plain["mbytes_sent"] / r["mbytes_sent"]
        r["messages_ratio"] = plain["messages_sent"] / r["messages_sent"]
    return results


def report(results: list[dict]) -> None:
    r0 = results[0]
    print(f"aggregation benchmark: 2 nodes x 2 threads, rows={r0['rows']} dim={r0['dim']} batch={r0['batch']} "
          f"steps/worker={r0['steps']} (push + pull each)")
    print(f"{'variant':<10} {'seconds':>8} {'MB sent':>9} {'messages':>9} {'plain/x bytes':>14} {'plain/x msgs':>13}")
    for r in results:
        print(f"{r['variant']:<10} {r['seconds']:>8.2f} {r['mbytes_sent']:>9.1f} {r['messages_sent']:>9} "
              f"{r['bytes_ratio']:>14.2f} {r['messages_ratio']:>13.2f}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--node", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.node:
        node_main(args.node, args.steps)
        return 0
    report(run(args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
