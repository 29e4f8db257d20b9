"""Scaling on paper, checked by counting: messages and bytes per node per step, model vs measurement.

    python benchmarks/bench_scaling.py                 # model for 2..100 nodes + a check on 2, 3, 4 local nodes
    python benchmarks/bench_scaling.py --model-only    # just the model table (no cluster)
    python benchmarks/bench_scaling.py --nodes 2,3 --steps 20

The model (docs/scaling.md explains it) gives the expected messages and bytes that one node sends
per training step, from the shape of a step (which table, how many key draws from which
distribution, how many floats per row) and the placement: static ranges (classic), a partition
pre-localized by relocation, hot keys replicated (synced once per step), or node aggregation.
Everything is an exact expectation over the step's random keys (no simulation): a node sends one
request per destination a step's keys touch, each server one reply per request it serves, and
every key costs 8 bytes per hop plus 4 * dim bytes wherever its row travels.

The check runs the same steps on a local cluster and counts with `node.stats()` (messages and
bytes sent to other nodes; coordinator traffic not counted), per node per step, and prints
measured / model. Counts do not depend on the machine's speed, so this check is exact up to the
sampling noise of the keys (a few percent at these step sizes), also on a busy machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HEADER = 40  # bytes of a pskv header (pskv.net.wire.HEADER_SIZE)


@dataclasses.dataclass(frozen=True)
class Op:
    """One table access per step: `draws` keys from `dist` ('uniform' or 'zipf:a') over `rows`, the
    distinct ones pulled and then pushed (`dim` float32 per row)."""

    app: str
    table: str
    rows: int
    dim: int
    draws: int
    dist: str

    def probs(self) -> np.ndarray:
        """(rows,) the probability of each key per draw."""
        if self.dist == "uniform":
            return np.full(self.rows, 1.0 / self.rows)
        a = float(self.dist.split(":")[1])
        w = 1.0 / np.arange(1, self.rows + 1) ** a
        return w / w.sum()

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return np.unique(rng.choice(self.rows, self.draws, p=self.probs()))


# the step shapes of the three apps at their defaults (smaller word2vec batch), on synthetic data
OPS = [
    Op("mf", "items", 5_000, 101, 1_000, "zipf:1.1"),  # --batch 1000 ratings, --rank 100 + bias
    Op("kge", "entities", 20_000, 200, 6_600, "uniform"),  # --batch 100: 2b positives + 2b*32 negatives
    Op("kge", "relations", 20, 200, 100, "uniform"),
    Op("word2vec", "syn0", 10_000, 100, 500, "zipf:1.0"),  # --batch-words 500 centre words
    Op("word2vec", "syn1neg", 10_000, 100, 15_000, "zipf:1.0"),  # contexts (window 5) x (1 + 5 negatives)
]
HOT = 64  # replicated keys (the head of the distribution)
LOCALITY = 0.9  # relocation: share of a worker's draws from its own, pre-localized partition


# ---- the model ---------------------------------------------------------------------------------------
def _hit(p: np.ndarray, draws: int) -> np.ndarray:
    """(m,) P(at least one of `draws` draws lands in i), for each key (or group of keys) of mass p[i]."""
    return -np.expm1(draws * np.log1p(-np.minimum(p, 1 - 1e-15)))


def _any(p: np.ndarray, draws: int) -> float:
    """P(at least one key of the group p is drawn)."""
    return float(_hit(np.array([p.sum()]), draws)[0])


def ranges(rows: int, nodes: int) -> np.ndarray:
    return np.array([i * rows // nodes for i in range(nodes + 1)], np.int64)


def classic(op: Op, nodes: int, replicated: np.ndarray | None = None) -> dict:
    """Expected messages and bytes one node sends per step (averaged over the nodes), static ranges.

    Each node pulls then pushes the distinct keys of its draws: per remote range touched, a PULL
    (keys) answered by a PULL_REPLY (rows), a PUSH (keys + rows) answered by an ACK. Averaged over
    the nodes, what a node sends as requester equals what it sends as server."""
    p = op.probs().copy()
    if replicated is not None:
        p[replicated] = 0.0  # served by the local replica
    b = ranges(op.rows, nodes)
    hit = _hit(p, op.draws)
    keys_in = np.array([hit[b[j]:b[j + 1]].sum() for j in range(nodes)])  # expected distinct keys per range
    touched = np.array([_any(p[b[j]:b[j + 1]], op.draws) for j in range(nodes)])
    remote_keys = keys_in.sum() * (nodes - 1) / nodes  # averaged over requesters
    dests = touched.sum() * (nodes - 1) / nodes
    msgs = 4 * dests
    nbytes = 4 * HEADER * dests + remote_keys * (8 + 8 + 4 * op.dim + 4 * op.dim)
    out = {"messages": msgs, "bytes": nbytes}
    if replicated is not None:  # one sync per step: each node sends its changed hot keys to every other
        changed = _hit(op.probs()[replicated], op.draws).sum()
        out["messages"] += 2 * (nodes - 1)  # REPLICA_SYNC + ACK
        out["bytes"] += (nodes - 1) * (2 * HEADER + changed * (8 + 4 * op.dim))
    return out


def aggregated(op: Op, nodes: int) -> dict:
    """NodeAggregate (one thread per node): a round is one AGG_PUSH (keys, sums and, since keys are
    in different rounds after the first step, a round per key) per remote owner, answered by one
    PULL_REPLY (rows): half the messages of a push and a pull, the same bytes. With T threads per
    node the sums of T threads travel once: bytes / T on the push side."""
    c = classic(op, nodes)
    dests = c["messages"] / 4
    return {"messages": 2 * dests, "bytes": c["bytes"] - 2 * HEADER * dests}


def relocated(op: Op, nodes: int, locality: float = LOCALITY) -> dict:
    """A partition per node, pre-localized by relocation: `locality` of the draws from the node's own
    partition (zipf within it, so its head is hot), the rest from the global distribution. Keys of
    another node's partition go to their manager (their static range), which forwards to the owner
    unless it owns them; the owner answers the requester directly (Lapse's routing, no location caches)."""
    p_all = op.probs()
    b = ranges(op.rows, nodes)
    owner = np.searchsorted(b, np.arange(op.rows), side="right") - 1  # manager range
    # the partition of node n is the manager range of node n + 1: it was moved (as in bench_placement)
    owner = (owner - 1) % nodes
    manager = np.searchsorted(b, np.arange(op.rows), side="right") - 1
    total = {"messages": 0.0, "bytes": 0.0}

    def groups(index: np.ndarray, weight: np.ndarray, size: int) -> np.ndarray:
        return np.bincount(index, weight, minlength=size)

    for n in range(nodes):
        mine = np.flatnonzero(owner == n)
        p = (1 - locality) * p_all
        local = op.probs()[:len(mine)]  # zipf (or uniform) within the partition, by rank
        p[mine] += locality * local / local.sum()
        hit = _hit(p, op.draws)
        remote = np.flatnonzero(owner != n)
        hop = np.where(manager[remote] == n, owner[remote], manager[remote])  # first hop of a remote key
        pr, kr, own = p[remote], hit[remote], owner[remote]
        served = own == hop
        part = _hit(groups(hop, pr, nodes), op.draws)
        reply = _hit(groups(hop[served], pr[served], nodes), op.draws)
        pair = hop[~served] * nodes + own[~served]
        fwd = _hit(groups(pair, pr[~served], nodes * nodes), op.draws)
        fwd_msgs = fwd.reshape(nodes, nodes).sum(axis=1)  # per first hop
        k_first = groups(hop, kr, nodes)
        k_served = groups(hop[served], kr[served], nodes)
        k_fwd = groups(hop[~served], kr[~served], nodes)
        partial = fwd_msgs > 0.5  # the reply of a part that was partly forwarded names its positions
        # pull and push: request part, replies, forwards (keys + positions [+ rows for push])
        msgs = 2 * (part + reply + 2 * fwd_msgs)
        nbytes = (2 * HEADER * (part + reply + 2 * fwd_msgs)
                  + k_first * (8 + 8 + 4 * op.dim)  # PULL keys, PUSH keys + rows
                  + k_served * 4 * op.dim + np.where(partial, k_served * 8, 0.0)  # PULL_REPLY rows (+ positions)
                  + k_fwd * (2 * (8 + 8) + 4 * op.dim)  # forwarded PULL and PUSH: keys + positions (+ rows)
                  + k_fwd * (4 * op.dim + 8))  # the owner's PULL_REPLY: rows + positions
        total["messages"] += float(msgs.sum())
        total["bytes"] += float(nbytes.sum())
    return {k: v / nodes for k, v in total.items()}


def model(op: Op, nodes: int) -> dict[str, dict]:
    hot = np.argsort(-op.probs(), kind="stable")[:HOT]
    return {"classic": classic(op, nodes), "replicate": classic(op, nodes, hot),
            "aggregate": aggregated(op, nodes), "relocate": relocated(op, nodes)}


def model_table(node_counts: list[int]) -> str:
    lines = ["| app / table | nodes | classic msgs | classic KB | relocate msgs | relocate KB | replicate msgs "
             "| replicate KB | aggregate msgs | aggregate KB |", "|" + " --- |" * 10]
    for op in OPS:
        for n in node_counts:
            m = model(op, n)
            cells = " | ".join(f"{m[v]['messages']:,.1f} | {m[v]['bytes'] / 1e3:,.1f}"
                               for v in ("classic", "relocate", "replicate", "aggregate"))
            lines.append(f"| {op.app} {op.table} | {n} | {cells} |")
    return "\n".join(lines)


# ---- the measurement ---------------------------------------------------------------------------------
def node_main(out: Path, steps: int) -> None:
    import pskv

    node = pskv.init()
    tables = {}
    for op in OPS:
        hot = np.sort(np.argsort(-op.probs(), kind="stable")[:HOT])
        base = f"{op.app}.{op.table}"
        tables[base, "classic"] = node.table(base + ".c", op.rows, op.dim)
        tables[base, "replicate"] = node.table(base + ".r", op.rows, op.dim,
                                               replicate=pskv.Replicate(keys=hot, syncs_per_sec=0))
        tables[base, "aggregate"] = node.table(base + ".a", op.rows, op.dim, aggregate=pskv.NodeAggregate())
        tables[base, "relocate"] = node.table(base + ".l", op.rows, op.dim)
    results = []

    def work(w: pskv.Worker) -> None:
        me, nodes = node.rank, node.num_nodes
        for op in OPS:
            base = f"{op.app}.{op.table}"
            b = ranges(op.rows, nodes)
            mine = np.arange(b[(me + 1) % nodes], b[(me + 1) % nodes + 1])  # the next node's range, moved here
            for variant in ("classic", "replicate", "aggregate", "relocate"):
                t = w.table(tables[base, variant].name)
                rng = np.random.default_rng([me, len(results)])
                if variant == "relocate":
                    t.localize(mine).wait()
                w.barrier()
                before = node.stats()
                for _ in range(steps):
                    if variant == "relocate":
                        own = int(rng.binomial(op.draws, LOCALITY))
                        local_p = op.probs()[:len(mine)]
                        keys = np.unique(np.concatenate([
                            mine[rng.choice(len(mine), own, p=local_p / local_p.sum())],
                            rng.choice(op.rows, op.draws - own, p=op.probs())]))
                    else:
                        keys = op.draw(rng)
                    grads = np.full((len(keys), op.dim), 1e-3, np.float32)
                    if variant == "aggregate":
                        t.push(keys, grads)
                        t.pull(keys)
                    else:
                        t.pull(keys)
                        t.push(keys, grads).wait()
                    if variant == "replicate":
                        w.wait_replica_sync()
                w.wait_all()
                w.barrier()
                after = node.stats()
                results.append({"op": base, "variant": variant, "rank": me,
                                "messages": (after["messages_sent"] - before["messages_sent"]) / steps,
                                "bytes": (after["bytes_sent"] - before["bytes_sent"]) / steps})

    node.run(work, threads=1)
    (out / f"node{node.rank}.json").write_text(json.dumps(results))
    node.shutdown()


def measure(nodes: int, steps: int) -> dict:
    from pskv.launch import start_local

    with tempfile.TemporaryDirectory(prefix="pskv-scaling-") as tmp:
        cmd = [sys.executable, __file__, "--node", tmp, "--steps", str(steps)]
        with start_local(nodes, cmd, threads=1) as cluster:
            if cluster.wait(timeout=900) != 0:
                raise SystemExit(f"the {nodes}-node run failed:\n{cluster.logs_tail()}")
        rows = [r for n in range(nodes) for r in json.loads((Path(tmp) / f"node{n}.json").read_text())]
    out: dict = {}
    for r in rows:
        cell = out.setdefault((r["op"], r["variant"]), {"messages": 0.0, "bytes": 0.0})
        cell["messages"] += r["messages"] / nodes
        cell["bytes"] += r["bytes"] / nodes
    return out


def check_table(node_counts: list[int], steps: int) -> str:
    lines = ["| app / table | variant | nodes | messages: model | measured | ratio | KB: model | measured | ratio |",
             "|" + " --- |" * 9]
    for n in node_counts:
        got = measure(n, steps)
        for op in OPS:
            m = model(op, n)
            for variant in ("classic", "relocate", "replicate", "aggregate"):
                g = got[f"{op.app}.{op.table}", variant]
                e = m[variant]
                lines.append(f"| {op.app} {op.table} | {variant} | {n} | {e['messages']:,.1f} | {g['messages']:,.1f} | "
                             f"{g['messages'] / max(e['messages'], 1e-9):.2f} | {e['bytes'] / 1e3:,.1f} | "
                             f"{g['bytes'] / 1e3:,.1f} | {g['bytes'] / max(e['bytes'], 1e-9):.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="2,3,4", help="node counts of the measured check")
    p.add_argument("--steps", type=int, default=30, help="steps per node and variant in the check")
    p.add_argument("--model-only", action="store_true")
    p.add_argument("--node", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.node:
        node_main(Path(args.node), args.steps)
        return 0
    print("model: messages and KB one node sends per step (averages over the nodes)\n")
    print(model_table([2, 4, 8, 16, 32, 100]))
    if not args.model_only:
        counts = [int(x) for x in args.nodes.split(",")]
        print(f"\ncheck: {args.steps} steps per node and variant on local clusters of {counts} nodes\n")
        print(check_table(counts, args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
