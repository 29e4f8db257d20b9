"""word2vec through pskv: skip-gram with negative sampling (SGNS), data-parallel over nodes and threads.

    pskv run word2vec -- --epochs 5                                  # 1 node x 1 thread, gensim's head500
    pskv run word2vec --nodes 2 --threads 2 -- --compare-gensim      # and gensim's Word2Vec side by side
    pskv run word2vec --nodes 2 --threads 2 -- --data lapse-toy --dim 10 --window 2 --neg 2 \\
        --epochs 4 --sample 1e-4 --data-words 10000                  # Lapse's README settings

The input vectors (`syn0`, uniform in +-1/dim as in gensim 4; word2vec.c's +-0.5/dim learns
less on small corpora: WordSim 0.33 vs 0.35 on head500) and output vectors
(`syn1neg`, zeros) are two pskv tables with row = word id (most frequent word first). Each worker
thread of each node trains on a contiguous share of the sentences, in minibatches of whole
sentences (`--batch-words`): subsample frequent words, pick each centre word's reduced window, draw
`--neg` negatives per (centre, context) pair, pull every row the batch needs once, run word2vec.c's
SGD over the batch in a numba nogil kernel on those local copies, and push new - old. `--prefetch`
pulls the next batch's rows while this one trains and adds this batch's deltas to the rows both
share, so they read as if pulled after this batch's push (one worker learns exactly as without).

Why updater "add" with the step in the worker rather than SGD on the server: word2vec's step size
alpha decays linearly with progress, which the worker knows; a word that occurs twice in a batch
must see its first update at its second occurrence (word2vec.c's sequential SGD), which only the
worker's local copy can give; and "add" commutes, so deltas from many workers (and replicas,
`--replicate N` for the N most frequent words) sum to the same rows in any order.

Negatives come from the unigram^0.75 distribution. By default the app draws them (numpy, alias
method) and pulls each distinct row once: the naive scheme, done by hand, because pskv's
pull_sample pulls one row per draw, about 15x the distinct rows of a batch here (7x slower on
2 nodes). `--sampling {naive,preloc,pool,onlylocal}` takes them from pskv's sampling API instead,
each batch's sample prepared one batch ahead so that preloc and pool localize in the meantime
(`--reuse` for pool). `--localize` moves the next batch's words here ahead (Lapse's localize_pos),
except the `--replicate N` hottest, which every node keeps a replica of. `--intent` signals each
batch's context words (syn0) and centres and negatives (syn1neg, drawn then) `--ahead` batches
early (pskv.data.Lookahead): the keys' managers move those one node intends.

At the end node 0 reports WordSim-353 Spearman and analogy accuracy (3CosAdd) over the
in-vocabulary questions; `--compare-gensim` trains gensim's Word2Vec alike and prints both. The test
sets are files `pskv data fetch gensim-text` cached, or yours (`--wordsim FILE`, `--analogies FILE`);
a run never downloads them, and says which command would when they are missing.

`--data` takes a text file or a directory of them (one sentence of space-separated words per line);
`--out FILE` writes the input vectors in word2vec's text format, which `load_vectors(FILE)` (and
gensim's KeyedVectors.load_word2vec_format) reads back.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

import pskv

from ..data.fetch import DataError
from ..data.lookahead import Lookahead
from ..data.text import Corpus, Unigram, Vocab, keep_probabilities, write_vectors
from . import common, word2vec_args
from .negatives import Negatives
from .skipgram import Step, ahead, batches, num_batches, warm_up
from .word2vec_args import check
from .word2vec_data import EvalSets, evaluate, load_tests, load_text, load_vectors  # noqa: F401 - the app's loader
from .word2vec_gensim import compare_gensim, gensim_available, train_gensim  # noqa: F401 - benchmarks' and tests'

_parser = word2vec_args.parser  # (benchmarks/bench_app_word2vec.py uses it)


# ---- distributed training -----------------------------------------------------------------------
@dataclass
class _Run:
    """What every worker thread of a node shares; `seconds` and `result` are node 0's."""

    session: common.Session
    vocab: Vocab
    corpus: Corpus
    keep: np.ndarray  # (V,) float64 subsampling keep probabilities
    unigram: Unigram
    syn0: pskv.Table  # the main thread's handle, for node 0's final pull
    tests: EvalSets
    seconds: float = 0.0  # training time, measured by node 0 thread 0
    result: dict | None = None  # node 0's final numbers (see _result)

    def shard(self, worker: int) -> Corpus:
        """Worker `worker`'s sentences (its share of --data-words, if given)."""
        data_words, workers = self.session.args.data_words, self.session.workers
        cap = None if data_words is None else max(1, data_words // workers)
        return self.corpus.shard(worker, workers, max_words=cap)

    @functools.cached_property
    def epoch_words(self) -> int:
        """Corpus words all workers read in one epoch."""
        return sum(self.shard(i).num_words for i in range(self.session.workers))


def _train(w: pskv.Worker, run: _Run) -> None:
    s = run.session
    args, me = s.args, s.index(w)
    shard = run.shard(me)
    syn0, syn1 = w.table("syn0"), w.table("syn1neg")
    negatives = Negatives(
        syn1, scheme=args.sampling, draw=run.unigram.draw, rng=np.random.default_rng([args.seed, me, 1])
    )
    step = Step(
        syn0,
        syn1,
        negatives,
        len(run.vocab),
        args.neg,
        localize_from=args.replicate if args.localize else None,
        prefetch=common.prefetches(args),
    )
    progress = common.Progress(
        w,
        total=run.epoch_words * (args.epochs - s.start_epoch),
        scale=s.workers,
        unit="words",
        mode=args.progress,
        watchdog=s.report.watchdog,
    )
    total, done = max(1, shard.num_words * args.epochs), shard.num_words * s.start_epoch  # (the learning rate's)
    clock = common.Clock(w, args)  # once per batch under --consistency bsp/ssp
    most = max(num_batches(run.shard(i), args.batch_words) for i in range(s.workers))
    start = time.monotonic()
    shares = common.Shares(s, w)  # with backups: the sentences of a dead node's workers are trained here too

    def of(piece: tuple[int, int, int]) -> Corpus:
        p, j, pieces = piece
        return run.shard(p).shard(j, pieces)

    def train_on(corpus: Corpus, rng) -> tuple[float, int]:
        """One pass over `corpus`; the learning rate decays over this worker's own words (pieces take the
        current one)."""
        nonlocal done
        loss, pairs = 0.0, 0
        stream: Iterable[tuple] = batches(corpus, run.keep, args.window, args.batch_words, rng)
        if args.intent:  # each batch's keys signaled --ahead batches early (AdaPM's intents)
            stream = Lookahead(stream, lambda b: _intended(syn0, syn1, b, negatives, args.neg), ahead=args.ahead)
        for words, centres, contexts in ahead(stream, step.prepare if step.prepares else None):
            a0 = args.alpha - (args.alpha - args.min_alpha) * done / total
            done += words if corpus is shard else 0
            a1 = args.alpha - (args.alpha - args.min_alpha) * done / total
            if len(centres):
                loss += step(centres, contexts, a0, a1)
                pairs += len(centres)
            progress.update(words)
            clock.tick()
        step.close()
        return loss, pairs

    for epoch in range(s.start_epoch + 1, args.epochs + 1):
        t0 = time.monotonic()
        rng = np.random.default_rng([args.seed, me, 0, epoch])
        pieces = shares.pieces()
        corpora = [shard] + [of(piece) for piece in pieces]
        results = [train_on(corpus, rng) for corpus in corpora]
        for piece in shares.late(w, pieces):  # a node died during this epoch
            corpora.append(of(piece))
            results.append(train_on(corpora[-1], rng))
        loss, pairs = sum(r[0] for r in results), sum(r[1] for r in results)
        clock.pad(epoch * most)  # every worker clocks as often before the reducer's barrier
        assert s.reducer is not None  # (run_app made it before training)
        sums = s.reducer.sum(w, [loss, pairs, sum(c.num_words for c in corpora)])
        seconds = time.monotonic() - t0
        if common.is_leader(w):
            metrics = {"loss": sums[0] / max(sums[1], 1), "words_per_s": int(sums[2] / max(seconds, 1e-9))}
            if shares.backups:
                metrics["words"] = int(sums[2])  # all of them, also when a node died
            if run.tests.pairs is not None:  # WordSim-353 is cheap (353 pairs); analogies wait for the end
                scores = evaluate(syn0.pull(np.arange(len(run.vocab))), run.vocab, run.tests, analogies=False)
                metrics["wordsim"] = scores["wordsim"].value
            s.report.epoch(w, epoch, progress, **metrics, seconds=seconds)
        s.checkpoint(w, epoch)
    progress.close()
    w.barrier()
    if common.is_leader(w):
        run.seconds = time.monotonic() - start


def _intended(syn0, syn1, batch: tuple, negatives: Negatives, neg: int) -> dict:
    """--intent: the keys a coming batch will use (pskv.data.Lookahead calls it `--ahead` batches
    early): its context words' syn0 rows; its centres' and negatives' syn1neg rows, the negatives the
    app draws for it drawn now (Step draws for a batch with pairs only, and so does this)."""
    _, centres, contexts = batch
    if not len(centres):
        return {}
    negs = negatives.predraw(len(centres) * neg) if negatives.scheme is None else np.zeros(0, np.int64)
    return {syn0: contexts, syn1: np.concatenate([centres, negs])}


def _tables(node: pskv.Node, args, vocab: Vocab, unigram: Unigram) -> pskv.Table:
    """Declare syn0 and syn1neg (collective); returns the main thread's syn0 handle."""
    extra: dict[str, Any] = {}
    if args.replicate:
        extra["replicate"] = pskv.Replicate(keys=np.arange(min(args.replicate, len(vocab))))
    extra["placement"] = common.placement(args)  # --lease, --location-caches
    syn0 = node.table(
        "syn0",
        rows=len(vocab),
        dim=args.dim,
        init=pskv.Uniform(-1.0 / args.dim, 1.0 / args.dim, seed=args.seed),
        **extra,
    )
    if args.sampling is not None:
        extra["sampling"] = pskv.Sampling(unigram.draw, scheme=args.sampling, reuse=args.reuse, seed=args.seed)
    node.table("syn1neg", rows=len(vocab), dim=args.dim, init=0.0, **extra)
    return syn0


def _setup(s: common.Session, vocab: Vocab, corpus: Corpus, tests: EvalSets) -> _Run:
    """Declare the tables (collective); node 0 prints what runs."""
    args, node = s.args, s.node
    unigram = Unigram(vocab.counts)
    run = _Run(
        s,
        vocab,
        corpus,
        keep_probabilities(vocab.counts, args.sample),
        unigram,
        _tables(node, args, vocab, unigram),
        tests,
    )
    per_epoch = run.epoch_words  # computed here, before the worker threads read it
    if node.rank == 0:
        negatives = f"pskv sampling, {args.sampling}" if args.sampling else "drawn by the app, naive"
        print(
            f"word2vec: {args.data}, {corpus.num_words:,} words in {corpus.num_sentences:,} sentences "
            f"({per_epoch:,} per epoch), {len(vocab):,} in the vocabulary; dim {args.dim}, window "
            f"{args.window}, {args.neg} negatives ({negatives}), {node.num_nodes} node(s) x {s.threads} "
            f"thread(s)",
            flush=True,
        )
        pairs = 2 * args.window * args.batch_words  # at most; about 60% of it with subsampling and reduced windows
        note = (
            node.num_nodes > 1
            and args.sampling in ("preloc", "pool")  # negatives localized each batch
            and common.relocation_note("word2vec", unigram.p[args.replicate :], pairs * args.neg // 2)
        )
        if note:
            print(note, flush=True)
        for note in tests.notes:
            print(note, file=sys.stderr, flush=True)
    return run


def _finish(run: _Run, wall: float) -> list[str]:
    """Node 0, the tables still up: the final numbers and summary lines; writes --out."""
    vectors = run.syn0.pull(np.arange(len(run.vocab)))  # (V, dim) float32; every push is in (barrier)
    run.result = _result(run, vectors, wall)
    out = run.session.args.out
    if out:
        write_vectors(out, run.vocab.words, vectors)
        run.result["lines"].insert(1, f"vectors: {out}")
    return run.result["lines"]


def _result(run: _Run, vectors: np.ndarray, wall: float) -> dict:
    """Node 0's final numbers and summary lines (the last one is the headline)."""
    args, rows = run.session.args, run.session.report.rows
    first = run.session.start_epoch + 1  # 1, or the epoch after a resumed checkpoint's
    words = (args.epochs - first + 1) * run.epoch_words
    result = {
        "seconds": run.seconds,
        "words_per_s": words / max(run.seconds, 1e-9),
        "first_loss": rows[0]["loss"] if rows else float("nan"),
        "loss": rows[-1]["loss"] if rows else float("nan"),
        **evaluate(vectors, run.vocab, run.tests),
    }
    result["lines"] = [
        f"word2vec on {args.data}: {args.epochs - first + 1} epochs of {run.epoch_words:,} words in {wall:.1f} s "
        f"(training {run.seconds:.2f} s, {result['words_per_s']:,.0f} words/s); loss {result['first_loss']:.4f} "
        f"in epoch {first}, {result['loss']:.4f} in epoch {args.epochs}",
    ]
    if "analogy" in result:
        result["lines"].append(f"analogy accuracy (3CosAdd) {result['analogy']}")
    if "wordsim" in result:
        result["lines"].append(f"{run.tests.wordsim_name} Spearman {result['wordsim']}")
    return result


def main(argv: list[str] | None = None) -> int:
    """Run word2vec on this node (or as a 1-node cluster); returns the exit status."""
    args = check(argv)
    try:  # every node reads the data before it joins: a malformed file stops them all alike, nothing written
        vocab, corpus = load_text(args)
        tests = load_tests(args.wordsim, args.analogies)
        warm_up(args.dim)
        return common.run_app(
            "word2vec",
            args,
            metrics=3,
            setup=lambda s: _setup(s, vocab, corpus, tests),
            train=_train,
            finish=_finish,
            then=compare_gensim if args.compare_gensim else None,
        )
    except DataError as exc:  # the same on every node: the data, not the cluster, is wrong
        print(f"pskv run word2vec: error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
