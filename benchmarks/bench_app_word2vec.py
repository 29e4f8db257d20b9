"""word2vec app benchmark: words/s, loss, WordSim-353 and analogy accuracy, with and without pskv, and gensim.

    .venv/bin/python benchmarks/bench_app_word2vec.py              # full (~4 min on the 2-core machine)
    .venv/bin/python benchmarks/bench_app_word2vec.py --quick      # fewer variants (~1.5 min)
    .venv/bin/python benchmarks/bench_app_word2vec.py --markdown   # also print the rows as a Markdown table

Variants, each skip-gram with negative sampling and the same hyperparameters (the app's defaults:
dim 100, window 5, 5 negatives, min-count 5, sample 1e-3, alpha 0.025 -> 0.0001, 5 epochs) on
gensim's head500 corpus (296,143 in-vocabulary words):
  baseline 1xT     one process, no server: the app's batches and numba kernel on plain numpy
                   arrays, T threads Hogwild-style (as word2vec.c and gensim do)
  classic NxT      `pskv run word2vec --nodes N --threads T` (static placement, naive negatives)
  replicate N 2x2  + replication of the N most frequent words (`--replicate N`)
  localize 2x2     + Lapse's localization of the next batch's words (`--localize`)
  sampling S 2x2   + pskv's sampling API with scheme S for the negatives (`--sampling S`), alone or with
                   replication of the 1000 hottest words (NuPS)
  gensim T         gensim's Word2Vec on the same sentences and vocabulary, T worker threads, if installed
and Lapse's toy corpus (lm/small.txt) with Lapse's README settings: 2 nodes x 2 threads, dim 10,
window 2, 2 negatives, 4 iterations of 10,000 words, subsampling 1e-4 (Lapse: 21.7 s on this machine).

`run(args) -> list[dict]` is what benchmarks/bench_apps.py calls; each row has app, variant, data,
nodes, threads, epochs, sec_per_epoch (median), train_seconds, wall_seconds (process start to exit),
words_per_s (corpus words read per training second), loss (mean per pair, last epoch), wordsim,
analogy, note and the command.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

APP = "word2vec"
TAG = "@@pskv "  # pskv.apps.common.TAG
DATA = "head500"
LAPSE = ["--data", "lapse-toy", "--dim", "10", "--window", "2", "--neg", "2", "--epochs", "4", "--sample", "1e-4",
         "--data-words", "10000"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer variants")
    p.add_argument("--data", default=DATA, help="the app's --data (head500, lee, lapse-toy or a file)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table too")
    return p


# ---- (a) the single-process baseline ---------------------------------------------------------------
def baseline(data: str, threads: int, flags: list[str] = ()) -> dict:
    """The app's batches and kernel on plain numpy arrays in this process, `threads` threads sharing them."""
    from pskv.apps import skipgram
    from pskv.apps import word2vec as w2
    from pskv.data.text import Unigram, keep_probabilities

    args = w2._parser().parse_args(["--data", data, *flags])
    start = time.monotonic()
    vocab, corpus = w2.load_text(args)
    skipgram.warm_up(args.dim)
    rng = np.random.default_rng(args.seed)
    syn0 = rng.uniform(-1 / args.dim, 1 / args.dim, (len(vocab), args.dim)).astype(np.float32)
    syn1 = np.zeros_like(syn0)
    keep, unigram = keep_probabilities(vocab.counts, args.sample), Unigram(vocab.counts)
    cap = None if args.data_words is None else max(1, args.data_words // threads)
    shards = [corpus.shard(t, threads, max_words=cap) for t in range(threads)]
    done, sums = [0] * threads, np.zeros((threads, 2))  # words so far; (loss, pairs) of this epoch

    def work(t: int, epoch: int) -> None:
        total = max(1, shards[t].num_words * args.epochs)
        negatives_rng, neu1e = np.random.default_rng([args.seed, t, 1, epoch]), np.zeros(args.dim, np.float32)
        for words, centres, contexts in skipgram.batches(shards[t], keep, args.window, args.batch_words,
                                                         np.random.default_rng([args.seed, t, 0, epoch])):
            a0 = args.alpha - (args.alpha - args.min_alpha) * done[t] / total
            done[t] += words
            a1 = args.alpha - (args.alpha - args.min_alpha) * done[t] / total
            negatives = unigram.draw(negatives_rng, len(centres) * args.neg).reshape(-1, args.neg)
            sums[t] += (skipgram.sgns(contexts, centres, negatives, syn0, syn1, a0, a1, neu1e), len(centres))

    seconds, loss = [], float("nan")
    for epoch in range(args.epochs):
        sums[:] = 0
        t0 = time.monotonic()
        pool = [threading.Thread(target=work, args=(t, epoch)) for t in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        seconds.append(time.monotonic() - t0)
        loss = sums[:, 0].sum() / max(sums[:, 1].sum(), 1)
    scores = w2.evaluate(syn0, vocab)
    words = args.epochs * sum(s.num_words for s in shards)
    return _row(f"baseline 1x{threads}", data, 1, threads, seconds, time.monotonic() - start, words, loss, scores,
                "numpy arrays + the app's numba kernel, no server",
                f"bench_app_word2vec.baseline({data!r}, threads={threads})")


# ---- (b), (c): the app through pskv ---------------------------------------------------------------
def app(variant: str, nodes: int, threads: int, flags: list[str], note: str = "", *, timeout: float = 600) -> dict:
    """Run `pskv run word2vec` on `nodes` x `threads` and read its lines (--progress json). After
    `timeout` seconds the launcher gets SIGTERM (it stops its nodes) and the row says so."""
    command = [sys.executable, "-m", "pskv", "run", APP, "--nodes", str(nodes), "--threads", str(threads), "--",
               *flags, "--progress", "json"]
    shown = f"pskv run word2vec --nodes {nodes} --threads {threads} -- {' '.join(flags)}"
    data = flags[flags.index("--data") + 1] if "--data" in flags else DATA
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the launcher stops every node on SIGTERM
        try:
            stdout, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
        return _row(variant, data, nodes, threads, [], time.monotonic() - start, 0, float("nan"), {},
                    f"stopped after {timeout:.0f} s (not finished); {note}", shown)
    wall = time.monotonic() - start
    msgs = [json.loads(line.split(TAG, 1)[1]) for line in stdout.splitlines() if TAG in line]
    epochs = [m for m in msgs if m.get("kind") == "epoch"]
    summary = " ".join(next((m["lines"] for m in msgs if m.get("kind") == "summary"), []))
    if proc.returncode != 0 or not epochs:
        tail = "\n".join((stdout + stderr).strip().splitlines()[-8:])
        return {**_row(variant, data, nodes, threads, [], wall, 0, float("nan"), {}, "FAILED", shown), "error": tail}
    words = int(re.search(r"epochs of ([\d,]+) words", summary).group(1).replace(",", "")) * len(epochs)
    scores = {name: float(m.group(1)) for name, pattern in (("wordsim", r"WordSim-353 Spearman (-?[\d.]+|nan)"),
                                                            ("analogy", r"analogy accuracy \(3CosAdd\) ([\d.]+|nan)"))
              if (m := re.search(pattern, summary))}
    train = float(re.search(r"training ([\d.]+) s", summary).group(1))
    row = _row(variant, data, nodes, threads, [e["seconds"] for e in epochs], wall, words, epochs[-1]["loss"],
               scores, note, shown)
    row["train_seconds"], row["words_per_s"] = train, words / max(train, 1e-9)
    return row


def gensim_row(data: str, threads: int) -> dict:
    """gensim's Word2Vec on the app's sentences and vocabulary with the app's default hyperparameters."""
    from pskv.apps import word2vec as w2

    args = w2._parser().parse_args(["--data", data])
    start = time.monotonic()
    vocab, corpus = w2.load_text(args)
    vectors, seconds = w2.train_gensim(args, vocab, [corpus], threads)
    import gensim

    return _row(f"gensim {threads}", data, 1, threads, [seconds / args.epochs] * args.epochs,
                time.monotonic() - start, args.epochs * corpus.num_words, float("nan"), w2.evaluate(vectors, vocab),
                f"gensim {gensim.__version__}, {threads} worker thread(s)",
                f"pskv.apps.word2vec.train_gensim (what --compare-gensim runs), workers={threads}")


def _row(variant, data, nodes, threads, seconds, wall, words, loss, scores, note, command) -> dict:
    train = float(sum(seconds))
    score = {k: float(getattr(v, "value", v)) for k, v in scores.items()}
    return {"app": APP, "variant": variant, "data": data, "nodes": nodes, "threads": threads, "epochs": len(seconds),
            "sec_per_epoch": statistics.median(seconds) if seconds else float("nan"), "train_seconds": train,
            "wall_seconds": wall, "words_per_s": words / train if train else float("nan"), "loss": float(loss),
            "wordsim": score.get("wordsim", float("nan")), "analogy": score.get("analogy", float("nan")),
            "note": note, "command": command}


def _technique_rows(flags: list[str], quick: bool) -> list[dict]:
    """(c): 2 nodes x 2 threads with each Lapse/NuPS technique."""
    wanted = [("replicate 100 2x2", ["--replicate", "100"], "the 100 most frequent words replicated"),
              ("replicate 1000 2x2", ["--replicate", "1000"], "1000 words: 45% of the negatives"),
              ("localize 2x2", ["--localize"], "the next batch's words localized ahead"),
              ("replicate 1000 + localize 2x2", ["--replicate", "1000", "--localize"],
               "Lapse2: hot words replicated, the others localized ahead"),
              ("sampling naive 2x2", ["--sampling", "naive"], "pskv's pull_sample: a row per draw"),
              ("replicate 1000 + sampling onlylocal 2x2", ["--replicate", "1000", "--sampling", "onlylocal"],
               "NuPS: local negatives only (biased)")]
    if not quick:
        wanted += [(f"replicate 1000 + sampling {s} 2x2", ["--replicate", "1000", "--sampling", s, *extra], note)
                   for s, extra, note in (("preloc", [], "negatives localized one batch ahead"),
                                          ("pool", ["--reuse", "4"], "pool of negatives, each used 4 times"))]
    # preloc and pool thrash here (every batch's sample covers ~97% of the vocabulary): preloc took 100 s
    # unloaded and did not finish in 240 s at load 5, so these rows get the same 600 s as the others
    return [app(variant, 2, 2, flags + extra, note, timeout=600) for variant, extra, note in wanted]


def run(args: argparse.Namespace) -> list[dict]:
    """Every variant (quick: fewer); returns the rows."""
    quick, data = getattr(args, "quick", False), getattr(args, "data", None) or DATA
    flags = ["--data", data]
    rows = [baseline(data, 1)] + ([] if quick else [baseline(data, 2)])
    for nodes, threads in ((1, 2), (2, 2)) if quick else ((1, 1), (1, 2), (2, 1), (2, 2)):
        rows.append(app(f"classic {nodes}x{threads}", nodes, threads, flags))
    rows += _technique_rows(flags, quick)
    if importlib.util.find_spec("gensim") is None:
        rows.append(_row("gensim", data, 1, 2, [], 0.0, 0, float("nan"), {}, "skipped: gensim is not installed "
                         "(pip install 'pskv[compare]')", "-"))
    else:
        rows += [gensim_row(data, t) for t in ((2,) if quick else (1, 2, 4))]
    rows.append(app("lapse settings, classic", 2, 2, LAPSE, "Lapse: 21.7 s for its README command"))
    rows.append(app("lapse settings, localize", 2, 2, LAPSE + ["--localize"],
                    "Lapse's README command localizes positives (--localize_pos 1)"))
    return rows


def markdown(rows: list[dict]) -> str:
    head = ("| data | variant | nodes x threads | s/epoch | train s | wall s | words/s | loss | WordSim | analogy "
            "| note |")
    lines = [head, "|" + " --- |" * 11]
    for r in rows:
        lines.append(f"| {r['data']} | {r['variant']} | {r['nodes']}x{r['threads']} | {r['sec_per_epoch']:.3f} | "
                     f"{r['train_seconds']:.2f} | {r['wall_seconds']:.1f} | {r['words_per_s']:,.0f} | "
                     f"{r['loss']:.4f} | {r['wordsim']:.4f} | {r['analogy']:.4f} | {r['note']} |")
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
