"""word2vec's minibatches of one worker: the skip-gram pairs of a batch of sentences, the distinct rows
they need, word2vec.c's SGNS kernel, and Step, which pulls a batch's rows, trains on them and pushes.

    for words, centres, contexts in ahead(batches(shard, keep, window, batch_words, rng), step.prepare):
        loss += step(centres, contexts, alpha0, alpha1)       # step = Step(syn0, syn1, negatives, ...)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numba
import numpy as np

import pskv

from ..data.text import Corpus, Unigram
from .negatives import Negatives


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


def batches(
    shard: Corpus, keep: np.ndarray, window: int, batch_words: int, rng: np.random.Generator
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """One epoch over `shard` in minibatches of whole sentences: (corpus words read, centres, contexts),
    the pairs after subsampling (each word kept with probability keep[word]) as (P,) int64 word ids."""
    offsets = shard.offsets
    s = 0
    while s < shard.num_sentences:
        e = int(np.searchsorted(offsets, offsets[s] + batch_words, side="left"))
        e = min(max(e, s + 1), shard.num_sentences)
        tokens = shard.tokens[offsets[s] : offsets[e]]  # (m,) int32
        kept = rng.random(len(tokens)) < keep[tokens]
        kept_before = np.concatenate([[0], np.cumsum(kept)])  # (m + 1,)
        kept_offsets = kept_before[offsets[s : e + 1] - offsets[s]]  # (e - s + 1,) sentence bounds after subsampling
        words = tokens[kept].astype(np.int64)
        shrink = rng.integers(0, window, len(words)) if window > 0 else np.zeros(len(words), np.int64)
        centres = np.empty(len(words) * 2 * window, np.int64)
        contexts = np.empty_like(centres)
        n = _pairs(words, kept_offsets, shrink, window, centres, contexts)
        yield len(tokens), centres[:n], contexts[:n]
        s = e


def ahead(batches: Iterable[tuple], prepare) -> Iterator[tuple]:
    """The batches of `batches` (an iterable: a Lookahead too), with prepare(batch) called for each one
    batch before it is handed out."""
    it = iter(batches)
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
        self.dim = dim
        self.arrays: dict[str, np.ndarray] = {}
        self.pushes: list = []

    def get(self, name: str, n: int) -> np.ndarray:
        """A C-contiguous (n, dim) float32 view of buffer `name`, grown as needed; contents undefined."""
        array = self.arrays.get(name)
        if array is None or len(array) < n:
            array = self.arrays[name] = np.empty(
                (max(n, int(1.5 * len(array)) if array is not None else n), self.dim), np.float32
            )
        return array[:n]

    def wait(self) -> None:
        pskv.wait(*self.pushes)  # pushes with copy=False read the buffers until they resolve
        self.pushes = []


class _Fetched:
    """A batch whose rows were asked for: its keys, local rows and buffers, the pulls in flight, and
    the pushes of this worker sent after those pulls (their rows miss them: Step catches them up)."""

    def __init__(self, buffers: _Buffers, keys0, ctx_local, keys1, neg_local, ctr_local) -> None:
        self.buffers, self.keys0, self.ctx_local = buffers, keys0, ctx_local
        self.keys1, self.neg_local, self.ctr_local = keys1, neg_local, ctr_local
        self.rows0 = buffers.get("rows0", len(keys0))  # (u0, dim) local copies of syn0
        self.rows1 = buffers.get("rows1", len(keys1))  # (u1, dim) local copies of syn1neg
        self.pulls: list = []
        self.missed: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (keys0, d0, keys1, d1)


class Step:
    """One worker's minibatch step: pull the rows a batch needs once, run word2vec.c's SGD on the
    local copies in the kernel, push new - old. With `prefetch`, prepare() pulls a coming batch's
    rows while the one before trains (their round trip passes during the kernel), and the step adds
    the deltas this worker pushed since then to the rows it shares with them (the `add` updater:
    exactly what a pull after those pushes reads, others' concurrent pushes aside, as ever). Owned
    by one worker thread."""

    def __init__(
        self,
        syn0,
        syn1,
        negatives: Negatives,
        rows: int,
        neg: int,
        *,
        localize_from: int | None = None,
        prefetch: bool = False,
    ) -> None:
        self.syn0, self.syn1, self.negatives, self.neg = syn0, syn1, negatives, neg
        self.localize_from = localize_from  # localize a coming batch's words with ids >= this (None: never)
        self.prefetch = prefetch and negatives.scheme is None  # pskv's sampling pulls when a batch draws
        self.prepares = self.prefetch or localize_from is not None or negatives.scheme in ("preloc", "pool")
        self.rows = Rows(rows)
        self.neu1e = np.zeros(syn0.dim, np.float32)  # (dim,) kernel scratch
        self._where = np.full(rows, -1, np.int64)  # key -> its row among a pushed batch's keys during a catch-up
        # alternate: one set's pushes may be in flight; with prefetch a third holds the coming batch
        self._buffers = [_Buffers(syn0.dim) for _ in range(3 if self.prefetch else 2)]
        self._turn = 0
        self._coming: list[_Fetched] = []  # prefetched batches, in order (at most one ahead of the step)

    def prepare(self, batch: tuple) -> None:
        """Get a coming batch ready while the one before trains: localize its words (Lapse's
        localize_pos; the replicated hottest excepted) and prepare its negatives' sample, or with
        prefetch pull its rows."""
        _, centres, contexts = batch
        if self.localize_from is not None and len(centres):
            words = np.unique(centres)  # every word of the batch that has a pair is a centre
            words = words[words >= self.localize_from]
            self.syn0.localize(words)  # not waited for: pulls of keys in transfer wait at the new owner
            self.syn1.localize(words)
        if len(centres):
            self.negatives.ahead(len(centres) * self.neg)
            if self.prefetch:  # the step skips a batch without pairs, so only those with pairs are fetched
                self._coming.append(self._fetch(centres, contexts))

    def __call__(self, centres: np.ndarray, contexts: np.ndarray, alpha0: float, alpha1: float) -> float:
        """Train on the (P,) pairs; returns their summed loss."""
        batch = self._coming.pop(0) if self._coming else self._fetch(centres, contexts)
        pskv.wait(*batch.pulls)
        rows0, rows1, buffers = batch.rows0, batch.rows1, batch.buffers
        for keys0, d0, keys1, d1 in batch.missed:
            self._catch_up(rows0, batch.keys0, keys0, d0)
            self._catch_up(rows1, batch.keys1, keys1, d1)
        old0, old1 = buffers.get("old0", len(batch.keys0)), buffers.get("old1", len(batch.keys1))
        np.copyto(old0, rows0)
        np.copyto(old1, rows1)
        loss = sgns(
            batch.ctx_local,
            batch.ctr_local,
            batch.neg_local.reshape(len(centres), self.neg),
            rows0,
            rows1,
            alpha0,
            alpha1,
            self.neu1e,
        )
        rows0 -= old0  # now the deltas
        rows1 -= old1
        buffers.pushes = [
            self.syn0.push(batch.keys0, rows0, copy=False),
            self.syn1.push(batch.keys1, rows1, copy=False),
        ]
        for coming in self._coming:  # pulled before this push: they need its deltas
            coming.missed.append((batch.keys0, rows0, batch.keys1, rows1))
        return loss

    def _fetch(self, centres: np.ndarray, contexts: np.ndarray) -> _Fetched:
        """Draw a batch's negatives, number its distinct keys and ask for their rows (pull_async with
        prefetch; else the syn1neg rows arrive before this returns, in this thread's own reply box)."""
        buffers = self._buffers[self._turn]
        self._turn = (self._turn + 1) % len(self._buffers)
        buffers.wait()  # the pushes of the batch that used these buffers last
        keys0, (ctx_local,), _, _ = self.rows(contexts)  # syn0 rows: the context words
        neg_keys, neg_rows = self.negatives.draw(len(centres) * self.neg)
        keys1, (neg_local, ctr_local), (n_neg, _), first = self.rows(neg_keys, centres)  # negatives, centres
        batch = _Fetched(buffers, keys0, ctx_local, keys1, neg_local, ctr_local)
        batch.pulls.append(self.syn0.pull_async(keys0, out=batch.rows0))
        if neg_rows is None:
            self._pull1(batch, keys1, batch.rows1)
        else:  # the sampling API brought the negatives' rows: pull only the other centres
            np.take(neg_rows, first[:n_neg], axis=0, out=batch.rows1[:n_neg])
            self._pull1(batch, keys1[n_neg:], batch.rows1[n_neg:])
        return batch

    def _pull1(self, batch: _Fetched, keys: np.ndarray, out: np.ndarray) -> None:
        if self.prefetch:
            batch.pulls.append(self.syn1.pull_async(keys, out=out))
        else:
            self.syn1.pull(keys, out=out)

    def _catch_up(self, rows: np.ndarray, keys: np.ndarray, pushed: np.ndarray, deltas: np.ndarray) -> None:
        """rows (of `keys`) += the deltas pushed for the same keys (in O(n): the keys are not sorted)."""
        self._where[pushed] = np.arange(len(pushed))
        at = self._where[keys]  # (u,) each key's row among the pushed, or -1
        self._where[pushed] = -1
        hit = np.flatnonzero(at >= 0)
        rows[hit] += deltas[at[hit]]

    def close(self) -> None:
        """At the end of a pass: wait for this worker's pushes (read-my-writes from here on)."""
        assert not self._coming, "a prefetched batch was left untrained"  # ahead() prepares only batches it yields
        for buffers in self._buffers:
            buffers.wait()
        self.negatives.close()


def warm_up(dim: int) -> None:
    """Load (or compile) the kernels before the clock starts; call them with the types of a batch."""
    ids, scratch = np.zeros(2, np.int64), np.zeros(4, np.int64)
    _pairs(ids, np.array([0, 2]), ids, 1, scratch, scratch.copy())
    Rows(1)(ids[:1], ids[:1])
    rows = np.zeros((1, dim), np.float32)
    sgns(ids[:1], ids[:1], np.zeros((1, 1), np.int64), rows, rows.copy(), 0.0, 0.0, np.zeros(dim, np.float32))
    Unigram(np.ones(2)).draw(np.random.default_rng(0), 1)
