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
SGD over the batch in a numba nogil kernel on those local copies, and push new - old.

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
except the `--replicate N` hottest, which every node keeps a replica of.

At the end node 0 reports WordSim-353 Spearman and analogy accuracy (3CosAdd) over the
in-vocabulary questions; `--compare-gensim` trains gensim's Word2Vec alike and prints both.
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numba
import numpy as np

import pskv

from ..data.fetch import DataError, fetch, lapse_toy_dir
from ..data.text import (Corpus, Score, Unigram, Vocab, analogy_accuracy, keep_probabilities, read_analogies,
                         read_corpus, read_wordsim, wordsim_spearman, write_vectors)
from . import common

_GENSIM_FILES = {"head500": "head500.noblanks.cor", "lee": "lee_background.cor"}


def _parser():
    p = common.parser("word2vec", "word2vec: skip-gram with negative sampling", epochs=5)
    g = p.add_argument_group("word2vec")
    g.add_argument("--data", default="head500", help="head500, lee (gensim's test corpora), lapse-toy, or a "
                                                    "text file with one sentence of space-separated tokens per line")
    g.add_argument("--clean", action="store_true", help="lower-case and drop punctuation (always on for lee)")
    g.add_argument("--dim", type=int, default=100, help="vector size")
    g.add_argument("--window", type=int, default=5, help="max distance between centre and context word")
    g.add_argument("--neg", type=int, default=5, help="negative samples per (centre, context) pair")
    g.add_argument("--min-count", type=int, default=5, help="drop words seen fewer times")
    g.add_argument("--alpha", type=float, default=0.025, help="initial step size, decays linearly")
    g.add_argument("--min-alpha", type=float, default=0.0001, help="step size at the end of training")
    g.add_argument("--sample", type=float, default=1e-3, help="subsampling threshold for frequent words (0: off)")
    g.add_argument("--batch-words", type=int, default=2000, help="corpus words per minibatch and worker")
    g.add_argument("--data-words", type=int, default=None, metavar="N",
                   help="train on about N corpus words per epoch in all (Lapse's --data_words)")
    g.add_argument("--reuse", type=int, default=1, help="--sampling pool: times each drawn negative is used")
    g.add_argument("--out", type=Path, metavar="FILE", help="write the input vectors in word2vec's text format")
    g.add_argument("--compare-gensim", action="store_true",
                   help="then train gensim's Word2Vec alike and print both (needs gensim: pip install 'pskv[compare]')")
    return p


# ---- kernels ------------------------------------------------------------------------------------
@numba.njit(nogil=True, cache=True)
def _pairs(tokens, offsets, shrink, window, centres, contexts):
    """Skip-gram pairs of word2vec.c: centre i with each j != i of its sentence within window - shrink[i]."""
    n = 0
    for s in range(len(offsets) - 1):
        lo, hi = offsets[s], offsets[s + 1]
        for i in range(lo, hi):
            reach = window - shrink[i]
            for j in range(max(lo, i - reach), min(hi, i + reach + 1)):
                if j != i:
                    centres[n] = tokens[i]
                    contexts[n] = tokens[j]
                    n += 1
    return n


@numba.njit(nogil=True, cache=True)
def _remap(keys, slot, distinct, first, local, n):
    """Number the distinct keys in order of appearance from n on: local[i] is the number of keys[i];
    a new key k gets distinct[m] = k, first[m] = i and slot[k] = m. Returns the new count."""
    for i in range(len(keys)):
        k = keys[i]
        m = slot[k]
        if m < 0:
            m = n
            slot[k], distinct[n], first[n] = n, k, i
            n += 1
        local[i] = m
    return n


class Rows:
    """The distinct keys of a batch and each key's local row, in O(n) with a (rows,) scratch array
    (np.unique would sort: 3x the time of the rest of a batch). One per worker: not thread-safe."""

    def __init__(self, rows: int) -> None:
        self._slot = np.full(rows, -1, np.int64)  # key -> local row during a call, else -1

    def __call__(self, *key_arrays: np.ndarray) -> tuple[np.ndarray, list[np.ndarray], list[int], np.ndarray]:
        """(distinct keys (u,) int64, local rows of each array, distinct count after each array,
        position of each distinct key's first occurrence within its array)."""
        size = sum(len(k) for k in key_arrays)
        distinct, first = np.empty(size, np.int64), np.empty(size, np.int64)
        local, counts, n = [], [], 0
        for keys in key_arrays:
            local.append(np.empty(len(keys), np.int64))
            n = _remap(keys, self._slot, distinct, first, local[-1], n)
            counts.append(n)
        self._slot[distinct[:n]] = -1
        return distinct[:n], local, counts, first[:n]


@numba.njit(nogil=True, fastmath=True, cache=True)
def sgns(contexts, centres, negatives, syn0, syn1, alpha0, alpha1, neu1e):
    """word2vec.c's skip-gram negative-sampling SGD over pairs, in order; returns the summed loss.

    Pair p updates input row syn0[contexts[p]] and output rows syn1[centres[p]] (label 1) and
    syn1[negatives[p, :]] (label 0; a negative equal to the centre is skipped, as in word2vec.c).
    The step decays linearly from alpha0 to alpha1 over the pairs. Rows are indices into the given
    arrays, which may be the whole tables or a batch's local copies. neu1e: (dim,) float32 scratch."""
    n, k, dim = len(contexts), negatives.shape[1], syn0.shape[1]
    loss = 0.0
    for p in range(n):
        alpha = alpha0 + (alpha1 - alpha0) * p / n
        l0, centre = contexts[p], centres[p]
        neu1e[:] = 0.0
        for d in range(k + 1):
            target, label = centre, 1.0
            if d > 0:
                target, label = negatives[p, d - 1], 0.0
                if target == centre:
                    continue
            f = np.float32(0.0)
            for c in range(dim):
                f += syn0[l0, c] * syn1[target, c]
            if f > 0:  # log sigmoid(f), stably, and sigmoid(f)
                e = np.exp(-f)
                log_sig, sig = -np.log1p(e), 1.0 / (1.0 + e)
            else:
                e = np.exp(f)
                log_sig, sig = f - np.log1p(e), e / (1.0 + e)
            loss -= log_sig if label > 0 else log_sig - f  # log sigmoid(-f) = log sigmoid(f) - f
            g = np.float32((label - sig) * alpha)
            for c in range(dim):
                neu1e[c] += g * syn1[target, c]
                syn1[target, c] += g * syn0[l0, c]
        for c in range(dim):
            syn0[l0, c] += neu1e[c]
    return loss


def num_batches(shard: Corpus, batch_words: int) -> int:
    """How many minibatches batches() makes of `shard` (the cuts do not depend on subsampling)."""
    offsets, s, n = shard.offsets, 0, 0
    while s < shard.num_sentences:
        e = int(np.searchsorted(offsets, offsets[s] + batch_words, side="left"))
        s, n = min(max(e, s + 1), shard.num_sentences), n + 1
    return n


def batches(shard: Corpus, keep: np.ndarray, window: int, batch_words: int,
            rng: np.random.Generator) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """One epoch over `shard` in minibatches of whole sentences: (corpus words read, centres, contexts),
    the pairs after subsampling (each word kept with probability keep[word]) as (P,) int64 word ids."""
    offsets = shard.offsets
    s = 0
    while s < shard.num_sentences:
        e = int(np.searchsorted(offsets, offsets[s] + batch_words, side="left"))
        e = min(max(e, s + 1), shard.num_sentences)
        tokens = shard.tokens[offsets[s]:offsets[e]]  # (m,) int32
        kept = rng.random(len(tokens)) < keep[tokens]
        kept_before = np.concatenate([[0], np.cumsum(kept)])  # (m + 1,)
        kept_offsets = kept_before[offsets[s:e + 1] - offsets[s]]  # (e - s + 1,) sentence bounds after subsampling
        words = tokens[kept].astype(np.int64)
        shrink = rng.integers(0, window, len(words)) if window > 0 else np.zeros(len(words), np.int64)
        centres = np.empty(len(words) * 2 * window, np.int64)
        contexts = np.empty_like(centres)
        n = _pairs(words, kept_offsets, shrink, window, centres, contexts)
        yield len(tokens), centres[:n], contexts[:n]
        s = e


# ---- data ---------------------------------------------------------------------------------------
def load_text(args) -> tuple[Vocab, Corpus]:
    """The vocabulary and the encoded corpus of --data (every node builds the same)."""
    if args.data in _GENSIM_FILES:
        path, clean = fetch("gensim-text", quiet=True) / _GENSIM_FILES[args.data], args.clean or args.data == "lee"
    elif args.data == "lapse-toy":
        path, clean = lapse_toy_dir() / "lm" / "small.txt", args.clean
    else:
        path, clean = Path(args.data), args.clean
        if not path.is_file():
            raise DataError(f"--data {args.data!r} is neither head500, lee, lapse-toy nor a file")
    sentences = read_corpus(path, clean=clean)
    vocab = Vocab.build(sentences, min_count=args.min_count)
    return vocab, vocab.encode(sentences)


@functools.lru_cache(maxsize=1)
def _evaluation_sets() -> tuple[list, list] | None:
    """(WordSim-353 pairs, analogy questions) from gensim's wheel; None, said once, if not to be had."""
    try:
        files = fetch("gensim-text", quiet=True)
        return read_wordsim(files / "wordsim353.tsv"), read_analogies(files / "questions-words.txt")
    except DataError as exc:
        print(f"word2vec: no WordSim/analogy evaluation: {exc}", file=sys.stderr, flush=True)
        return None


def evaluate(vectors: np.ndarray, vocab: Vocab, *, analogies: bool = True) -> dict[str, Score]:
    """WordSim-353 Spearman and (unless `analogies` is False) 3CosAdd analogy accuracy of `vectors`;
    empty if the evaluation sets cannot be fetched."""
    if _evaluation_sets() is None:
        return {}
    pairs, questions = _evaluation_sets()
    scores = {"wordsim": wordsim_spearman(vectors, vocab, pairs)}
    if analogies:
        scores["analogy"] = analogy_accuracy(vectors, vocab, questions)
    return scores


# ---- distributed training -----------------------------------------------------------------------
class Negatives:
    """Negative words for one worker. `scheme` None: drawn here from unigram^0.75 with numpy, and the
    step pulls each distinct row once (the naive scheme). Else through pskv's sampling API with that
    scheme (the table's Sampling draws with the same Unigram): a handle per batch, prepared one batch
    ahead so that preloc and pool localize while the batch before trains."""

    def __init__(self, table, unigram: Unigram, rng: np.random.Generator, *, scheme: str | None) -> None:
        self.table, self.unigram, self.rng, self.scheme = table, unigram, rng, scheme
        self._ready: collections.deque = collections.deque()  # handles prepared for the coming batches

    def ahead(self, n: int) -> None:
        """Prepare the sample of a coming batch of n negatives (in batch order)."""
        if self.scheme is not None:
            self._ready.append(self.table.prepare_sample(n))

    def draw(self, n: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(n,) int64 word ids and, from the sampling API, their (n, dim) float32 rows (else None)."""
        if self.scheme is None:
            return self.unigram.draw(self.rng, n), None
        handle = self._ready.popleft() if self._ready else self.table.prepare_sample(n)
        try:
            keys, vals = self.table.pull_sample(handle, n)
        finally:
            self.table.finish_sample(handle)
        keys = np.asarray(keys, np.int64)
        if len(keys) < n:  # a biased scheme (onlylocal) may give fewer: reuse them
            keys, vals = np.resize(keys, n), np.resize(vals, (n, vals.shape[1]))
        return keys, vals


@dataclass
class _Run:
    args: object
    vocab: Vocab
    corpus: Corpus
    keep: np.ndarray  # (V,) float64 subsampling keep probabilities
    unigram: Unigram
    reducer: common.Reducer
    report: common.Report
    workers: int
    threads: int
    scheme: str | None  # sampling scheme of pskv's sampling API for the negatives; None: drawn by the app
    seconds: float = 0.0  # training time, measured by node 0 thread 0

    def shard(self, worker: int) -> Corpus:
        """Worker `worker`'s sentences (its share of --data-words, if given)."""
        cap = None if self.args.data_words is None else max(1, self.args.data_words // self.workers)
        return self.corpus.shard(worker, self.workers, max_words=cap)

    @functools.cached_property
    def epoch_words(self) -> int:
        """Corpus words all workers read in one epoch."""
        return sum(self.shard(i).num_words for i in range(self.workers))


def _train(w: pskv.Worker, run: _Run) -> None:
    args = run.args
    me = w.rank * run.threads + w.thread
    shard = run.shard(me)
    syn0, syn1 = w.table("syn0"), w.table("syn1neg")
    negatives = Negatives(syn1, run.unigram, np.random.default_rng([args.seed, me, 1]), scheme=run.scheme)
    step = Step(syn0, syn1, negatives, len(run.vocab), args.neg,
                localize_from=args.replicate if args.localize else None)
    progress = common.Progress(w, total=run.epoch_words * args.epochs, scale=run.workers, unit="words",
                               mode=args.progress, watchdog=run.report.watchdog)
    total, done = max(1, shard.num_words * args.epochs), 0
    clock = common.Clock(w, args)  # once per batch under --consistency bsp/ssp
    most = max(num_batches(run.shard(i), args.batch_words) for i in range(run.workers))
    start = time.monotonic()
    for epoch in range(1, args.epochs + 1):
        t0, loss, pairs = time.monotonic(), 0.0, 0
        rng = np.random.default_rng([args.seed, me, 0, epoch])
        for words, centres, contexts in _ahead(batches(shard, run.keep, args.window, args.batch_words, rng),
                                               step.prepare if step.prepares else None):
            a0 = args.alpha - (args.alpha - args.min_alpha) * done / total
            done += words
            a1 = args.alpha - (args.alpha - args.min_alpha) * done / total
            if len(centres):
                loss += step(centres, contexts, a0, a1)
                pairs += len(centres)
            progress.update(words)
            clock.tick()
        step.close()
        clock.pad(epoch * most)  # every worker clocks as often before the reducer's barrier
        sums = run.reducer.sum(w, [loss, pairs, shard.num_words])
        seconds = time.monotonic() - t0
        if common.is_leader(w):
            metrics = {"loss": sums[0] / max(sums[1], 1), "words_per_s": int(sums[2] / max(seconds, 1e-9))}
            if _evaluation_sets() is not None:  # WordSim-353 is cheap (353 pairs); analogies wait for the end
                scores = evaluate(syn0.pull(np.arange(len(run.vocab))), run.vocab, analogies=False)
                metrics["wordsim"] = scores["wordsim"].value
            run.report.epoch(w, epoch, progress, **metrics, seconds=seconds)
    progress.close()
    w.barrier()
    if common.is_leader(w):
        run.seconds = time.monotonic() - start


def _ahead(it: Iterator[tuple], prepare) -> Iterator[tuple]:
    """The batches of `it`, with prepare(batch) called for each one batch before it is handed out."""
    if prepare is None:
        yield from it
        return
    following = next(it, None)
    if following is not None:
        prepare(following)
    while following is not None:
        current, following = following, next(it, None)
        if following is not None:
            prepare(following)
        yield current


class _Buffers:
    """Arrays reused from batch to batch (fresh memory costs up to 3x the copy: page faults), and the
    pushes that still read them."""

    def __init__(self, dim: int) -> None:
        self.dim, self.arrays, self.pushes = dim, {}, []

    def get(self, name: str, n: int) -> np.ndarray:
        """A C-contiguous (n, dim) float32 view of buffer `name`, grown as needed; contents undefined."""
        array = self.arrays.get(name)
        if array is None or len(array) < n:
            array = self.arrays[name] = np.empty((max(n, int(1.5 * len(array)) if array is not None else n),
                                                  self.dim), np.float32)
        return array[:n]

    def wait(self) -> None:
        pskv.wait(*self.pushes)  # pushes with copy=False read the buffers until they resolve
        self.pushes = []


class Step:
    """One worker's minibatch step: pull the rows a batch needs once, run word2vec.c's SGD on the
    local copies in the kernel, push new - old. Owned by one worker thread."""

    def __init__(self, syn0, syn1, negatives: Negatives, rows: int, neg: int, *,
                 localize_from: int | None = None) -> None:
        self.syn0, self.syn1, self.negatives, self.neg = syn0, syn1, negatives, neg
        self.localize_from = localize_from  # localize a coming batch's words with ids >= this (None: never)
        self.prepares = localize_from is not None or negatives.scheme in ("preloc", "pool")
        self.rows = Rows(rows)
        self.neu1e = np.zeros(syn0.dim, np.float32)  # (dim,) kernel scratch
        self._buffers = [_Buffers(syn0.dim), _Buffers(syn0.dim)]  # alternate: one set's pushes may be in flight
        self._turn = 0

    def prepare(self, batch: tuple) -> None:
        """Get a coming batch ready while the one before trains: localize its words (Lapse's
        localize_pos; the replicated hottest excepted) and prepare its negatives' sample."""
        _, centres, _ = batch
        if self.localize_from is not None and len(centres):
            words = np.unique(centres)  # every word of the batch that has a pair is a centre
            words = words[words >= self.localize_from]
            self.syn0.localize(words)  # not waited for: pulls of keys in transfer wait at the new owner
            self.syn1.localize(words)
        if len(centres):
            self.negatives.ahead(len(centres) * self.neg)

    def __call__(self, centres: np.ndarray, contexts: np.ndarray, alpha0: float, alpha1: float) -> float:
        """Train on the (P,) pairs; returns their summed loss."""
        n, buffers = len(centres), self._buffers[self._turn]
        self._turn ^= 1
        buffers.wait()
        keys0, (ctx_local,), _, _ = self.rows(contexts)  # syn0 rows: the context words
        rows0 = buffers.get("rows0", len(keys0))  # (u0, dim) local copies
        pull0 = self.syn0.pull_async(keys0, out=rows0)
        neg_keys, neg_rows = self.negatives.draw(n * self.neg)
        keys1, (neg_local, ctr_local), (n_neg, _), first = self.rows(neg_keys, centres)  # negatives, centres
        rows1 = buffers.get("rows1", len(keys1))  # (u1, dim) local copies of syn1neg
        if neg_rows is None:
            self.syn1.pull(keys1, out=rows1)
        else:  # the sampling API brought the negatives' rows: pull only the other centres
            np.take(neg_rows, first[:n_neg], axis=0, out=rows1[:n_neg])
            self.syn1.pull(keys1[n_neg:], out=rows1[n_neg:])
        pull0.wait()
        old0, old1 = buffers.get("old0", len(keys0)), buffers.get("old1", len(keys1))
        np.copyto(old0, rows0)
        np.copyto(old1, rows1)
        loss = sgns(ctx_local, ctr_local, neg_local.reshape(n, self.neg), rows0, rows1, alpha0, alpha1, self.neu1e)
        rows0 -= old0  # now the deltas
        rows1 -= old1
        buffers.pushes = [self.syn0.push(keys0, rows0, copy=False), self.syn1.push(keys1, rows1, copy=False)]
        return loss

    def close(self) -> None:
        for buffers in self._buffers:
            buffers.wait()


def _tables(node: pskv.Node, args, vocab: Vocab, unigram: Unigram) -> pskv.Table:
    """Declare syn0 and syn1neg (collective); returns the main thread's syn0 handle."""
    extra = {"replicate": np.arange(min(args.replicate, len(vocab)))} if args.replicate else {}
    syn0 = node.table("syn0", rows=len(vocab), dim=args.dim,
                      init=pskv.Uniform(-1.0 / args.dim, 1.0 / args.dim, seed=args.seed), **extra)
    if args.sampling is not None:  # common.parse() made sure pskv has the sampling API
        extra["sampling"] = pskv.Sampling(unigram.draw, scheme=args.sampling, reuse=args.reuse, seed=args.seed)
    node.table("syn1neg", rows=len(vocab), dim=args.dim, init=0.0, **extra)
    return syn0


def _warm_up(dim: int) -> None:
    """Load (or compile) the kernels before the clock starts; call them with the types of a batch."""
    ids, scratch = np.zeros(2, np.int64), np.zeros(4, np.int64)
    _pairs(ids, np.array([0, 2]), ids, 1, scratch, scratch.copy())
    Rows(1)(ids[:1], ids[:1])
    rows = np.zeros((1, dim), np.float32)
    sgns(ids[:1], ids[:1], np.zeros((1, 1), np.int64), rows, rows.copy(), 0.0, 0.0, np.zeros(dim, np.float32))
    Unigram(np.ones(2)).draw(np.random.default_rng(0), 1)


def _node_main(args) -> int:
    vocab, corpus = load_text(args)
    _warm_up(args.dim)
    node = common.init_node(args)
    result = None
    try:
        unigram = Unigram(vocab.counts)
        syn0 = _tables(node, args, vocab, unigram)
        threads = node.config.threads
        run = _Run(args, vocab, corpus, keep_probabilities(vocab.counts, args.sample), unigram,
                   common.Reducer(node, size=3), common.Report("word2vec", args), node.num_nodes * threads,
                   threads, args.sampling)
        per_epoch = run.epoch_words  # computed here, before the worker threads read it
        if node.rank == 0:
            negatives = f"pskv sampling, {args.sampling}" if args.sampling else "drawn by the app, naive"
            print(f"word2vec: {args.data}, {corpus.num_words:,} words in {corpus.num_sentences:,} sentences "
                  f"({per_epoch:,} per epoch), {len(vocab):,} in the vocabulary; dim {args.dim}, window "
                  f"{args.window}, {args.neg} negatives ({negatives}), {node.num_nodes} node(s) x {threads} "
                  f"thread(s)", flush=True)
            pairs = 2 * args.window * args.batch_words  # at most; about 60% of it with subsampling and reduced windows
            note = (node.num_nodes > 1 and args.sampling in ("preloc", "pool")  # negatives localized each batch
                    and common.relocation_note("word2vec", unigram.p[args.replicate:], pairs * args.neg // 2))
            if note:
                print(note, flush=True)
        start = time.monotonic()
        with run.report.watchdog:  # a worker blocked for --stall-timeout stops the node, never a hang
            node.run(lambda w: _train(w, run), threads=threads)
        if node.rank == 0:
            vectors = syn0.pull(np.arange(len(vocab)))  # (V, dim) float32; every push is in (barrier)
            result = _result(run, vectors, time.monotonic() - start)
            if args.out:
                write_vectors(args.out, vocab.words, vectors)
                result["lines"].insert(1, f"vectors: {args.out}")
    finally:
        node.shutdown()
    if result is not None:
        lines = result["lines"]
        if args.compare_gensim:
            lines = _compare_gensim(run, result) + lines
        run.report.summary(lines)
    return 0


def _result(run: _Run, vectors: np.ndarray, wall: float) -> dict:
    """Node 0's final numbers and summary lines (the last one is the headline)."""
    args, rows = run.args, run.report.rows
    words = args.epochs * run.epoch_words
    result = {"seconds": run.seconds, "words_per_s": words / max(run.seconds, 1e-9),
              "first_loss": rows[0]["loss"] if rows else float("nan"),
              "loss": rows[-1]["loss"] if rows else float("nan"), **evaluate(vectors, run.vocab)}
    result["lines"] = [
        f"word2vec on {args.data}: {args.epochs} epochs of {run.epoch_words:,} words in {wall:.1f} s "
        f"(training {run.seconds:.2f} s, {result['words_per_s']:,.0f} words/s); loss {result['first_loss']:.4f} "
        f"in epoch 1, {result['loss']:.4f} in epoch {args.epochs}",
    ]
    if "analogy" in result:
        result["lines"] += [f"analogy accuracy (3CosAdd) {result['analogy']}",
                            f"WordSim-353 Spearman {result['wordsim']}"]
    return result


# ---- gensim, side by side -----------------------------------------------------------------------
def gensim_available() -> bool:
    return importlib.util.find_spec("gensim") is not None


def train_gensim(args, vocab: Vocab, shards: list[Corpus], workers: int) -> tuple[np.ndarray, float]:
    """gensim's Word2Vec on the same sentences and vocabulary with the same hyperparameters:
    ((V, dim) float32 vectors in our word order, seconds of model.train())."""
    from gensim.models import Word2Vec

    words = np.array(vocab.words, dtype=object)
    sentences = [list(words[c.tokens[c.offsets[i]:c.offsets[i + 1]]]) for c in shards for i in range(c.num_sentences)]
    model = Word2Vec(sg=1, hs=0, negative=args.neg, window=args.window, vector_size=args.dim, alpha=args.alpha,
                     min_alpha=args.min_alpha, sample=args.sample, min_count=1, workers=workers, seed=args.seed)
    model.build_vocab(sentences)  # min_count=1: the sentences hold only our vocabulary's words already
    start = time.monotonic()
    model.train(sentences, total_examples=len(sentences), epochs=args.epochs)
    seconds = time.monotonic() - start
    vectors = np.zeros((len(vocab), args.dim), np.float32)  # a word of no shard (--data-words) stays 0
    known = [i for i, w in enumerate(vocab.words) if w in model.wv.key_to_index]
    vectors[known] = model.wv[[vocab.words[i] for i in known]]
    return vectors, seconds


def _compare_gensim(run: _Run, ours: dict) -> list[str]:
    args = run.args
    vectors, seconds = train_gensim(args, run.vocab, [run.shard(i) for i in range(run.workers)], run.workers)
    theirs = {"seconds": seconds, "words_per_s": args.epochs * run.epoch_words / max(seconds, 1e-9),
              **evaluate(vectors, run.vocab)}
    rows = [("train seconds", "{:.2f}", "seconds"), ("words/s", "{:,.0f}", "words_per_s"),
            ("WordSim-353 Spearman", "{}", "wordsim"), ("analogy accuracy", "{}", "analogy")]
    lines = [f"{'':<22}{'pskv':<36}gensim, {run.workers} worker thread(s)"]
    lines += [f"{name:<22}{fmt.format(ours.get(key, '-')):<36}{fmt.format(theirs.get(key, '-'))}"
              for name, fmt, key in rows if key in ours or key in theirs]
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run word2vec on this node (or as a 1-node cluster); returns the exit status."""
    p = _parser()
    args = common.parse(p, argv)
    if min(args.dim, args.neg, args.batch_words, args.epochs, args.reuse) < 1 or args.window < 0:
        p.error("--dim, --neg, --batch-words, --epochs and --reuse must be >= 1, --window >= 0")
    if args.compare_gensim and not gensim_available():
        p.error("--compare-gensim needs gensim, which is not installed: pip install 'pskv[compare]' "
                "(or pip install gensim)")
    if args.data_words is not None and args.data_words < 1:
        p.error("--data-words must be >= 1")
    try:
        return _node_main(args)
    except DataError as exc:  # the same on every node: the data, not the cluster, is wrong
        print(f"pskv run word2vec: error: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
