"""KGE app benchmark: seconds per epoch and filtered test MRR of ComplEx, with and without pskv.

    .venv/bin/python benchmarks/bench_app_kge.py              # full: UMLS, Nations, Lapse's toy data (~5 min)
    .venv/bin/python benchmarks/bench_app_kge.py --quick      # Nations and Lapse's toy data only (~1 min)
    .venv/bin/python benchmarks/bench_app_kge.py --markdown   # also print the rows as a Markdown table

Variants, each the same model and hyperparameters:
  baseline        one process, no server: numpy arrays, the app's numba kernel, the same Adagrad rule
  classic NxT     `pskv run kge --nodes N --threads T` (static placement, naive negative sampling)
  localize 2x2    + Lapse's pre-localization of the next batch (`--localize`)
  sampling S 2x2  + pskv's sampling scheme S for the negatives (`--sampling S`)
  replicate 2x2   + NuPS's replication of the hottest entities (`--replicate N`)
and Lapse's toy KGE data with Lapse's README settings (ComplEx, 100 complex dimensions, 6
negatives, lr 0.1, 4 epochs, 2 nodes; regulariser: see LAPSE), classic and with Lapse's techniques.

`run(args) -> list[dict]` is what benchmarks/bench_apps.py calls; each row has app, variant,
data, nodes, threads, epochs, sec_per_epoch (median training seconds of an epoch, evaluation
excluded), train_seconds, wall_seconds (process start to exit, data loading included), mrr
(filtered test MRR), hits10 and note.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np

APP = "kge"
TAG = "@@pskv "  # pskv.apps.common.TAG
SETTINGS = {  # data -> app flags of the benchmark runs (the tuned defaults plus the epochs)
    "umls": ["--epochs", "30"],
    "nations": ["--epochs", "30"],
    "lapse-toy": ["--epochs", "12", "--dim", "200", "--neg", "6"],
}
TECHNIQUE_EPOCHS = 6  # the technique rows (c) and their classic 2x2 reference run this many epochs: relocation
# of these small, dense graphs is slow (every worker needs every entity all the time), so full runs take minutes
# Lapse's README run: ComplEx, embed_dim 100 (complex numbers: 200 floats here), 6 negatives, lr 0.1, 4 epochs,
# 2 nodes, the partitioned train file. Its "L2 0.1" is not our per-occurrence L2 (which at 0.1 leaves test MRR at
# 0.02): the runs keep this app's default loss and regulariser (cross-entropy, N3 0.01).
LAPSE = ["--data", "lapse-toy", "--train-file", "train.partitioned.2x2.del", "--epochs", "4", "--dim", "200",
         "--neg", "6", "--lr", "0.1", "--eval-every", "2"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="Nations and Lapse's toy data only")
    p.add_argument("--data", help="comma-separated data sets (default: umls,nations,lapse-toy; quick: nations)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    return p


# ---- (a) the single-process baseline -------------------------------------------------------------------------


def baseline(data: str, flags: list[str]) -> dict:
    """Train with the app's kernel and flags on plain numpy arrays in this process (1 thread)."""
    from pskv.apps import kge
    from pskv.data.kg import Filter, load
    from pskv.updaters import Adagrad

    args = kge._parser().parse_args(["--data", data, *flags])
    start = time.monotonic()
    kg = load(data, seed=args.seed) if data != "lapse-toy" else kge._lapse(args)
    rng = np.random.default_rng(args.seed)
    tables = {}
    for name, rows in (("ent", kg.num_entities), ("rel", kg.num_relations)):
        values = rng.normal(0, args.init_std, (rows, args.dim)).astype(np.float32)
        tables[name] = (values, np.zeros_like(values))  # rows and Adagrad accumulators
    rule = Adagrad(lr=args.lr)
    train = kg.train[rng.permutation(len(kg.train))]
    seconds, n, cplx = [], args.neg, args.model == "complex"
    for _ in range(args.epochs):
        t0 = time.monotonic()
        order = rng.permutation(len(train))
        for lo in range(0, len(order), args.batch):
            tri = train[order[lo:lo + args.batch]]
            pos_ids = np.concatenate([tri[:, 0], tri[:, 2]])
            neg_ids = rng.integers(0, kg.num_entities, len(tri) * 2 * n)
            E, R = tables["ent"][0], tables["rel"][0]
            pos, rel, neg = E[pos_ids], R[tri[:, 1]], E[neg_ids]
            grads = [np.empty_like(x) for x in (pos, rel, neg)]
            kge.batch_grads(pos, rel, neg, pos_ids, neg_ids, n, cplx, args.loss == "ce", kge._REGS[args.reg],
                            args.reg_weight, *grads)
            rule.apply(*tables["ent"], np.concatenate([pos_ids, neg_ids]), np.concatenate([grads[0], grads[2]]))
            rule.apply(*tables["rel"], tri[:, 1], grads[1])
        seconds.append(time.monotonic() - t0)
    sums = kge.evaluate(tables["ent"][0], tables["rel"][0], kg.test, Filter(kg.all_triples(), kg.num_entities,
                                                                             kg.num_relations), args.model)
    return _row("baseline", data, 1, 1, args.epochs, seconds, time.monotonic() - start,
                sums[0] / sums[4], sums[3] / sums[4], "numpy arrays + numba kernel, no server")


# ---- (b), (c): the app through pskv --------------------------------------------------------------------------


def app(variant: str, data: str, nodes: int, threads: int, flags: list[str], note: str = "") -> dict:
    """Run `pskv run kge` on `nodes` x `threads` and read its epoch lines (--progress json)."""
    command = [sys.executable, "-m", "pskv", "run", APP, "--nodes", str(nodes), "--threads", str(threads), "--",
               "--data", data, *flags, "--progress", "json"]
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=1800)
    except subprocess.TimeoutExpired:  # SIGTERM: the launcher stops its nodes (SIGKILL would orphan them)
        proc.terminate()
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        return {**_row(variant, data, nodes, threads, 0, [], time.monotonic() - start, float("nan"), float("nan"),
                       "stopped after 1800 s (not finished)"), "command": _command(nodes, threads, data, flags)}
    proc = subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        return {**_row(variant, data, nodes, threads, 0, [], wall, float("nan"), float("nan"), "FAILED"),
                "error": tail, "command": _command(nodes, threads, data, flags)}
    msgs = [json.loads(line.split(TAG, 1)[1]) for line in proc.stdout.splitlines() if TAG in line]
    epochs = [m for m in msgs if m.get("kind") == "epoch"]
    summary = next((m["lines"] for m in msgs if m.get("kind") == "summary"), [])
    hits10 = next((float(x.split("Hits@10 ")[1].split()[0]) for x in summary if "Hits@10" in x), float("nan"))
    return {**_row(variant, data, nodes, threads, len(epochs), [e["seconds"] for e in epochs], wall,
                   epochs[-1].get("test_mrr", float("nan")), hits10, note),
            "command": _command(nodes, threads, data, flags)}


def _command(nodes: int, threads: int, data: str, flags: list[str]) -> str:
    return f"pskv run kge --nodes {nodes} --threads {threads} -- --data {data} {' '.join(flags)}".strip()


def _row(variant, data, nodes, threads, epochs, seconds, wall, mrr, hits10, note) -> dict:
    return {"app": APP, "variant": variant, "data": data, "nodes": nodes, "threads": threads, "epochs": epochs,
            "sec_per_epoch": statistics.median(seconds) if seconds else float("nan"),
            "train_seconds": float(sum(seconds)), "wall_seconds": wall, "mrr": float(mrr), "hits10": float(hits10),
            "note": note}


def _technique_rows(data: str, flags: list[str]) -> list[dict]:
    """(c): 2 nodes x 2 threads with each Lapse/NuPS technique, and classic for reference, all for
    TECHNIQUE_EPOCHS epochs."""
    flags = _with_epochs(flags, TECHNIQUE_EPOCHS)
    rows = [app(f"classic 2x2, {TECHNIQUE_EPOCHS} epochs", data, 2, 2, flags, "reference for the rows below")]
    wanted = [("localize 2x2", ["--localize"], "pre-localization of the next batch"),
              ("sampling preloc 2x2", ["--sampling", "preloc"], "negatives localized a batch ahead"),
              ("sampling pool 2x2", ["--sampling", "pool", "--reuse", "16"], "pool, each negative used 16x"),
              ("sampling onlylocal 2x2", ["--sampling", "onlylocal"], "negatives among local entities"),
              ("replicate 2x2", ["--replicate", "16"], "the 16 hottest entities replicated")]
    return rows + [app(variant, data, 2, 2, flags + extra, note) for variant, extra, note in wanted]


def _with_epochs(flags: list[str], epochs: int) -> list[str]:
    out = list(flags)
    if "--epochs" in out:
        out[out.index("--epochs") + 1] = str(epochs)
        return out
    return out + ["--epochs", str(epochs)]


def run(args: argparse.Namespace) -> list[dict]:
    """Every variant on every data set of `args` (quick: fewer); returns the rows."""
    quick = getattr(args, "quick", False)
    chosen = getattr(args, "data", None)
    datasets = chosen.split(",") if chosen else (["nations"] if quick else ["umls", "nations", "lapse-toy"])
    rows = []
    for data in datasets:
        flags = SETTINGS.get(data, [])
        rows.append(baseline(data, flags))
        for nodes, threads in ((1, 1), (1, 2), (2, 2)) if not quick else ((1, 2), (2, 2)):
            rows.append(app(f"classic {nodes}x{threads}", data, nodes, threads, flags))
        if not quick:
            rows += _technique_rows(data, flags)
    rows.append(app("lapse settings, classic", "lapse-toy", 2, 1, LAPSE[2:], "Lapse: 94.8 s classic"))
    rows.append(app("lapse settings, localize + pool x16", "lapse-toy", 2, 1,
                    LAPSE[2:] + ["--localize", "--sampling", "pool", "--reuse", "16"],
                    "Lapse: 2.46 s with pre-localization + pool sampling (reuse 16)"))
    return rows


def markdown(rows: list[dict]) -> str:
    head = "| data | variant | nodes x threads | s/epoch | train s | wall s | test MRR | Hits@10 | note |"
    lines = [head, "|" + " --- |" * 9]
    for r in rows:
        lines.append(f"| {r['data']} | {r['variant']} | {r['nodes']}x{r['threads']} | {r['sec_per_epoch']:.3f} | "
                     f"{r['train_seconds']:.2f} | {r['wall_seconds']:.1f} | {r['mrr']:.4f} | {r['hits10']:.4f} | "
                     f"{r['note']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    rows = run(args)
    for r in rows:
        print(json.dumps(r), flush=True)
    if args.markdown:
        print(markdown(rows))
    return 1 if any(r["note"] == "FAILED" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
