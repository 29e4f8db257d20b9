"""`pskv bench`: pull/push speed of pskv next to plain numpy and raw pyzmq, in one process and across two nodes.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_kv.py           # full run, 1-2 min on 2 idle cores
    PYTHONPATH=src .venv/bin/python -m pskv bench --quick            # fewer sizes/repeats, < 40 s
    pskv bench --sizes 1000,100000 --dims 64 --window 8 --no-copy
    pskv bench --floor-only --rounds 7 --budget 1                    # only the raw-pyzmq floor table
    pskv bench --auth --no-copy --sizes 1,1000,100000 --dims 64 --rounds 0   # what authentication costs

For every n_keys in --sizes and dim in --dims, on float32 tables, with unique random keys:

  numpy   np.take(data, keys, axis=0, out=buf)  and  data[keys] += vals  on a (rows, dim) array
  local   a 1-node cluster: t.pull_async(keys, out=buf).wait()  and  t.push(keys, vals).wait()
  remote  2 node processes (this process is node 0, a child process node 1); node 0 pulls and
          pushes keys that node 1 owns. mode `rtt`: one request at a time, .wait() each (p50/p99
          latency); mode `window`: W requests outstanding (throughput).

  auth    with --auth, the remote cells again on a second 2-node cluster that shares a secret
          (net.auth: CURVE, so every message is encrypted), as where `remote+auth`; a last table
          puts each next to its unauthenticated twin.

  floor   node 1 also serves a raw pyzmq ROUTER (np.take for a pull, data[keys] += vals for a
          push, zero-copy frames, one message per op) and node 0 is the client of both, on a
          (200,000, 64) float32 table "floor" (keys owned by node 1): 1-key and 1,000-key round
          trips, 100,000-key pulls with and without out=, pushes, 8 outstanding 1-key pulls.
          --rounds paired rounds; in each, raw and pskv calls alternate call by call (windowed
          runs block by block). The table gives the medians and pskv speed / raw speed.

keys/s and GB/s (of values: n_keys * dim * 4 bytes) come from the median call (numpy, local,
rtt) or from the total time of the windowed run; `x numpy` is the speed relative to the numpy
op of the same size (same op: pull vs np.take, push vs fancy +=). A summary checks the targets
of DESIGN.md "Performance model". Nodes are started here with subprocess, not by `pskv launch`.
"""

from __future__ import annotations

import argparse
import sys
import time

from .cells import Plan
from .floor import Floor, floor_table
from .nodes import run
from .report import auth_table, load_average, machine, revision, table, targets

__all__ = ["machine", "main", "run"]

_FULL_SIZES = (1, 1_000, 100_000, 1_000_000)
_QUICK_SIZES = (1, 1_000, 100_000)


def _ints(text: str) -> list[int]:
    try:
        values = [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers, e.g. 1000,100000") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers")
    return values


def main(argv: list[str] | None = None) -> int:
    """`pskv bench [--quick] [--sizes ...] [--dims ...] [--window W] [--no-copy] [--no-remote]`."""
    p = argparse.ArgumentParser(
        prog="pskv bench", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="sizes 1,1000,100000 and short runs (< 40 s)")
    p.add_argument("--sizes", type=_ints, help="n_keys per request, comma-separated (default 1,1000,100000,1000000)")
    p.add_argument("--dims", type=_ints, default=[1, 64], help="row widths, comma-separated (default 1,64)")
    p.add_argument("--window", type=int, default=8, help="outstanding requests in the throughput runs (default 8)")
    p.add_argument("--budget", type=float, help="seconds per measurement (default 1.0, quick 0.1)")
    p.add_argument("--no-copy", action="store_true", help="remote push with copy=False (no copy of the values)")
    p.add_argument("--no-remote", action="store_true", help="skip the 2-node measurements")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="paired rounds of the raw-pyzmq floor (default 5, quick 3; 0: no floor)",
    )
    p.add_argument("--floor-only", action="store_true", help="only the raw-pyzmq floor table")
    p.add_argument(
        "--auth",
        action="store_true",
        help="the remote cells also on an authenticated cluster (a shared secret: CURVE), side by side",
    )
    args = p.parse_args(argv)
    quick = args.quick
    sizes = args.sizes or list(_QUICK_SIZES if quick else _FULL_SIZES)
    plan = Plan(
        budget=args.budget or (0.1 if quick else 1.0),
        reps_min=3 if quick else 5,
        reps_max=60 if quick else 200,
        window=max(1, args.window),
        copy=not args.no_copy,
    )
    print(
        f"# pskv bench  {time.strftime('%Y-%m-%d %H:%M')}  (pskv {revision()})\n\nmachine: {machine()}\n"
        f"sizes {sizes}, dims {args.dims}, window {plan.window}, budget {plan.budget} s, "
        f"remote push copy={plan.copy}\n",
        flush=True,
    )
    t0 = time.perf_counter()
    rounds = (3 if quick else 5) if args.rounds is None else max(0, args.rounds)
    if args.no_remote and not args.floor_only:
        rounds = 0
    floors: list[Floor] = []
    results = run(
        sizes,
        args.dims,
        plan,
        remote=not args.no_remote and not args.floor_only,
        say=lambda s: print(s, file=sys.stderr, flush=True),
        floor_rounds=max(rounds, args.floor_only),
        cells=not args.floor_only,
        floors=floors,
        auth=args.auth,
    )
    if results:
        print(table(results))
        print("\n## targets\n")
        for name, got, ok in targets(results):
            mark = "n/a " if ok is None else ("MET " if ok else "MISS")
            print(f"- [{mark}] {name}: {got}")
    if any(r.where == "remote+auth" for r in results):
        print("\n## authentication: the remote cells without and with a cluster secret (CURVE)\n")
        print(auth_table(results))
    if floors:
        print(f"\n## the floor: raw pyzmq and pskv, {len(floors[0].raw)} paired rounds, medians\n")
        print(floor_table(floors))
    print(f"\ntotal time {time.perf_counter() - t0:.0f} s; load average at the end {load_average()}")
    return 0
