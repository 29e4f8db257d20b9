"""Placement benchmark: classic vs. relocation vs. relocation + replication (Lapse / NuPS).

    python benchmarks/bench_placement.py                      # 1 node, then 2 nodes, x 2 threads
    python benchmarks/bench_placement.py --quick --nodes 2,4  # scaling in one run

Workload: a sparse, skewed, data-clustered one. Each worker owns a partition of the keys (its
"data"), and the partition starts on *another* node, as in Lapse's experiments; 90% of each batch
is drawn zipf-skewed from the worker's partition, 10% from a global zipf whose head is shared by
everyone. Every step pulls the batch's rows and pushes an update. Variants, one run each, same
work per worker:
  single  : 1 node x T threads (shared memory, no network): the baseline to aim at
  classic : N nodes x T threads, static range placement
  reloc   : same, each worker localizes its partition first (pre-localization)
  reloc+r : same, plus the 64 hottest global keys replicated on every node
Printed: updates/s, its ratio to the 1-node row and to classic at the same N, the share of keys
served locally, and MB sent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

ROWS, DIM, BATCH, HOT = 200_000, 16, 64, 64
_TAG = "@@bench "


def _keys(rng, part: np.ndarray, n: int) -> np.ndarray:
    own = part[np.minimum(rng.zipf(1.2, int(n * 0.9)) - 1, len(part) - 1)]
    shared = np.minimum(rng.zipf(1.2, n - len(own)) - 1, ROWS - 1)  # global head: keys 0, 1, 2, ...
    return np.concatenate([own, shared]).astype(np.int64)


def node_main(variant: str, steps: int) -> None:
    import pskv

    node = pskv.init()
    kw = {}
    if variant == "reloc+r":
        kw = {"replicate": pskv.Replicate(keys=np.arange(HOT), syncs_per_sec=25)}
    node.table("w", rows=ROWS, dim=DIM, **kw)
    workers = node.num_nodes * node.config.threads
    other = (node.rank + 1) % node.num_nodes

    def work(w: pskv.Worker) -> None:
        t = w.table("w")
        g = other * node.config.threads + w.thread  # a partition inside the other node's range
        part = np.arange(g * ROWS // workers, (g + 1) * ROWS // workers)
        rng = np.random.default_rng([w.rank, w.thread])
        if variant.startswith("reloc"):
            t.localize(part).wait()
        w.barrier()
        start = time.perf_counter()
        grad = np.full((BATCH, DIM), 1e-3, np.float32)
        for _ in range(steps):
            keys = _keys(rng, part, BATCH)
            t.pull(keys)
            t.push(keys, grad)
        w.wait_all()
        w.wait_replica_sync()
        w.barrier()
        if w.thread == 0:
            s = node.stats()
            ts = s["tables"]["w"]
            print(_TAG + json.dumps({"seconds": time.perf_counter() - start, "rank": node.rank,
                                     "local": ts["local_keys"], "remote": ts["remote_keys"],
                                     "bytes": s["bytes_sent"], "forwards": ts["forwards"]}), flush=True)

    node.run(work)
    node.shutdown()


def run_variant(variant: str, steps: int, nodes: int, threads: int) -> dict:
    from pskv.launch import start_local

    cmd = [sys.executable, __file__, "--node", variant, "--steps", str(steps)]
    with start_local(nodes, cmd, threads=threads) as cluster:
        status = cluster.wait(timeout=600)
        if status != 0:
            raise SystemExit(f"{variant} failed:\n{cluster.logs_tail()}")
        rows = [json.loads(line.split(_TAG, 1)[1]) for r in range(nodes)
                for line in cluster.output(r).splitlines() if _TAG in line]
    seconds = max(r["seconds"] for r in rows)
    local, remote = sum(r["local"] for r in rows), sum(r["remote"] for r in rows)
    updates = nodes * threads * steps * BATCH
    return {"variant": variant, "nodes": nodes, "seconds": seconds, "updates_per_s": updates / seconds,
            "local_share": local / max(1, local + remote), "mbytes": sum(r["bytes"] for r in rows) / 1e6}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--nodes", default="2", help="comma-separated node counts, e.g. 2,4 (each also runs classic)")
    p.add_argument("--threads", type=int, default=2, help="worker threads per node (the 1-node row too)")
    p.add_argument("--node", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    steps = args.steps or (500 if args.quick else 3000)
    if args.node:
        node_main(args.node, steps)
        return 0
    counts = [int(n) for n in args.nodes.split(",")]
    single = run_variant("single", steps, 1, args.threads)
    results = [single] + [run_variant(v, steps, n, args.threads) for n in counts
                          for v in ("classic", "reloc", "reloc+r")]
    print(f"placement benchmark: rows={ROWS} dim={DIM} batch={BATCH} steps/worker={steps}, "
          f"{args.threads} thread(s) per node")
    print(f"{'variant':<9} {'nodes':>5} {'seconds':>8} {'updates/s':>12} {'x 1-node':>9} {'x classic':>10} "
          f"{'local':>7} {'MB sent':>9}")
    for r in results:
        classic = next(c for c in results if c["variant"] in ("classic", "single") and c["nodes"] == r["nodes"])
        print(f"{r['variant']:<9} {r['nodes']:>5} {r['seconds']:>8.2f} {r['updates_per_s']:>12,.0f} "
              f"{r['updates_per_s'] / single['updates_per_s']:>9.2f} {r['updates_per_s'] / classic['updates_per_s']:>10.2f} "
              f"{r['local_share']:>7.1%} {r['mbytes']:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
