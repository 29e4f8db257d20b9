"""The word2vec app: its kernels against plain numpy, then real runs on a slice of gensim's text and on
Lapse's toy corpus, where the loss must fall and words of similar contexts must end up close."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pskv.apps import skipgram, word2vec
from pskv.data import fetch
from pskv.data.text import Corpus, Vocab, read_corpus, read_vectors

SLICE_LINES = 60  # of head500's 250 lines: about 76,000 in-vocabulary words, a few seconds per run


# ---- kernels, in this process ---------------------------------------------------------------------
def _sgns_reference(contexts, centres, negatives, syn0, syn1, alpha):
    """word2vec.c's skip-gram negative-sampling step, pair by pair, in float64 numpy."""
    loss = 0.0
    for p in range(len(contexts)):
        l0, neu1e = contexts[p], np.zeros(syn0.shape[1])
        for target, label in [(centres[p], 1.0)] + [(t, 0.0) for t in negatives[p] if t != centres[p]]:
            f = syn0[l0] @ syn1[target]
            sig = 1 / (1 + np.exp(-f))
            loss -= np.log(sig) if label else np.log(1 - sig)
            g = (label - sig) * alpha
            neu1e += g * syn1[target]
            syn1[target] += g * syn0[l0]
        syn0[l0] += neu1e
    return loss


def test_sgns_kernel_matches_numpy_reference():
    """The numba kernel gives word2vec.c's updates and loss, including a negative equal to the centre."""
    rng = np.random.default_rng(0)
    syn0, syn1 = rng.normal(0, 0.5, (6, 8)), rng.normal(0, 0.5, (6, 8))
    contexts, centres = np.array([0, 1, 2, 0, 5]), np.array([1, 0, 3, 4, 2])
    negatives = np.array([[2, 3], [4, 0], [3, 5], [1, 4], [0, 1]])  # pair 1 and 2 draw their own centre
    expected0, expected1 = syn0.copy(), syn1.copy()
    expected_loss = _sgns_reference(contexts, centres, negatives, expected0, expected1, 0.1)
    got0, got1 = syn0.astype(np.float32), syn1.astype(np.float32)
    loss = skipgram.sgns(contexts, centres, negatives, got0, got1, 0.1, 0.1, np.zeros(8, np.float32))
    assert loss == pytest.approx(expected_loss, rel=1e-4)
    assert np.allclose(got0, expected0, atol=1e-5) and np.allclose(got1, expected1, atol=1e-5)


def test_batches_make_the_pairs_of_each_sentence_within_its_window():
    """Without subsampling each word pairs with every other word of its sentence within the window,
    never across sentences; the reduced window only shrinks that set."""
    corpus = Corpus(np.array([0, 1, 2, 3, 4, 5], np.int32), np.array([0, 4, 6]))
    keep = np.ones(6)
    (words, centres, contexts), = skipgram.batches(corpus, keep, 3, 100, np.random.default_rng(0))
    pairs = set(zip(centres.tolist(), contexts.tolist()))
    allowed = {(i, j) for i in range(4) for j in range(4) if i != j} | {(4, 5), (5, 4)}
    assert words == 6 and pairs <= allowed and len(pairs) == len(centres)
    assert {(4, 5), (5, 4)} <= pairs  # neighbours are always within any reduced window


def test_rows_numbers_distinct_keys_in_order_of_appearance():
    """Rows gives each distinct key one local row, across arrays, and resets its scratch for the next call."""
    rows = skipgram.Rows(10)
    keys, (a, b), counts, first = rows(np.array([7, 3, 7]), np.array([3, 9, 9, 1]))
    assert keys.tolist() == [7, 3, 9, 1] and counts == [2, 4]
    assert a.tolist() == [0, 1, 0] and b.tolist() == [1, 2, 2, 3] and first.tolist() == [0, 1, 1, 3]
    assert rows(np.array([1]))[0].tolist() == [1]


def test_compare_gensim_without_gensim_is_a_clear_usage_error(monkeypatch, capsys):
    """--compare-gensim without gensim installed stops before training and says how to install it."""
    monkeypatch.setattr(word2vec, "gensim_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        word2vec.main(["--compare-gensim"])
    assert exit_info.value.code == 2
    assert "pip install 'pskv[compare]'" in capsys.readouterr().err


# ---- real runs -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def text_slice(tmp_path_factory):
    """The first lines of gensim's head500 corpus, fetched for real."""
    lines = (fetch("gensim-text") / "head500.noblanks.cor").read_text().splitlines()[:SLICE_LINES]
    path = tmp_path_factory.mktemp("text") / "head500-slice.cor"
    path.write_text("\n".join(lines) + "\n")
    return path


def _train(cluster_factory, tmp_path, nodes: int, threads: int, *args: str) -> tuple[list[dict], Path]:
    out, log = tmp_path / "vectors.txt", tmp_path / "epochs.jsonl"
    command = [sys.executable, "-m", "pskv.apps.word2vec", "--out", str(out), "--log", str(log),
               "--progress", "none", *args]
    cluster = cluster_factory(nodes, command, threads=threads)
    status = cluster.wait(timeout=90)
    assert status == 0, cluster.logs_tail()
    return [json.loads(line) for line in log.read_text().splitlines()], out


def _context_neighbours(corpus: Corpus, top: int, window: int = 5) -> np.ndarray:
    """For each of the `top` most frequent words, the other one whose context counts are most alike."""
    tokens = corpus.tokens.astype(np.int64)
    counts = np.zeros((top, int(tokens.max()) + 1))
    for offset in range(1, window + 1):
        left, right = tokens[:-offset], tokens[offset:]
        np.add.at(counts, (left[left < top], right[left < top]), 1)
        np.add.at(counts, (right[right < top], left[right < top]), 1)
    unit = counts / np.linalg.norm(counts, axis=1, keepdims=True)
    alike = unit @ unit.T
    np.fill_diagonal(alike, -1)
    return alike.argmax(axis=1)


def _assert_learned(rows: list[dict], vectors_path, corpus_path, epochs: int) -> None:
    assert [r["epoch"] for r in rows] == list(range(1, epochs + 1))
    assert rows[-1]["loss"] < 0.9 * rows[0]["loss"], rows  # the first epoch starts at (neg + 1) log 2
    sentences = read_corpus(corpus_path)
    vocab = Vocab.build(sentences, min_count=5)
    words, vectors = read_vectors(vectors_path)
    assert words == vocab.words
    centred = vectors - vectors.mean(axis=0)  # SGNS vectors share a common direction; compare what differs
    unit = centred / np.linalg.norm(centred, axis=1, keepdims=True)
    top = 300
    neighbours = _context_neighbours(vocab.encode(sentences), top)
    similar = float(np.mean(np.einsum("ij,ij->i", unit[:top], unit[neighbours])))
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, top, 2000), rng.integers(0, top, 2000)
    random_pairs = float(np.mean(np.einsum("ij,ij->i", unit[a[a != b]], unit[b[a != b]])))
    assert similar > random_pairs + 0.3, (similar, random_pairs)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("nodes,threads", [(1, 2), (2, 1), (2, 2)])
def test_word2vec_learns_gensim_text_slice(cluster_factory, tmp_path, text_slice, nodes, threads):
    """5 epochs on a slice of head500: the loss falls below 0.9x epoch 1 and words whose contexts are
    most alike get a cosine 0.3 above random pairs (mean-centred vectors)."""
    rows, vectors = _train(cluster_factory, tmp_path, nodes, threads, "--data", str(text_slice), "--epochs", "5",
                           "--dim", "50")
    _assert_learned(rows, vectors, text_slice, 5)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_word2vec_with_replication_relocation_and_sampling_api_learns(cluster_factory, tmp_path, text_slice):
    """2 nodes x 1 thread with the 200 hottest words replicated, the others localized ahead and the
    negatives from pskv's sampling API (onlylocal): it still learns as the classic runs do."""
    rows, vectors = _train(cluster_factory, tmp_path, 2, 1, "--data", str(text_slice), "--epochs", "5", "--dim",
                           "50", "--replicate", "200", "--localize", "--sampling", "onlylocal")
    _assert_learned(rows, vectors, text_slice, 5)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_word2vec_lapse_toy_corpus_with_lapse_settings_through_pskv_run(tmp_path):
    """`pskv run word2vec` on Lapse's lm/small.txt with Lapse's README settings (2 nodes x 2 threads,
    dim 10, window 2, 2 negatives, 4 epochs of 10,000 words): finishes with 4 epochs whose loss is
    below the untrained 3 log 2 (so little data barely moves dim-10 vectors: this is Lapse's smoke test)."""
    _lapse_toy_or_skip()
    log = tmp_path / "epochs.jsonl"
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", "word2vec", "--nodes", "2", "--threads", "2", "--",
                           "--data", "lapse-toy", "--dim", "10", "--window", "2", "--neg", "2", "--epochs", "4",
                           "--sample", "1e-4", "--data-words", "10000", "--log", str(log), "--progress", "none"],
                          capture_output=True, text=True, timeout=100)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert re.search(r"\[node 0\] word2vec on lapse-toy: 4 epochs of 10,000 words", out), out
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4], out
    assert all(r["loss"] < 3 * np.log(2) for r in rows), rows


def _lapse_toy_or_skip() -> None:
    """Lapse's toy data lies beside the repository (../shared), not in it: skip where it is not."""
    from pskv.data.fetch import DataError, lapse_toy_dir

    try:
        lapse_toy_dir()
    except DataError:
        pytest.skip("Lapse's toy data is not beside this checkout (set PSKV_LAPSE_TOY to its folder)")


# ---- prefetch (issue 31): one worker's Step on tables in this process ------------------------------
class _Done:
    def __init__(self, result=None) -> None:
        self.result = result

    def wait(self, timeout=None):
        return self.result


class _AddTable:
    """A table of the `add` updater whose rows change at once (a node's own rows); logs each call."""

    def __init__(self, name: str, rows: int, dim: int, calls: list, seed: int) -> None:
        self.name, self.dim, self.calls = name, dim, calls
        self.data = np.random.default_rng(seed).normal(0, 0.1, (rows, dim)).astype(np.float32)

    def pull(self, keys, *, out):
        self.calls.append(f"pull {self.name}")
        out[:] = self.data[keys]
        return out

    def pull_async(self, keys, *, out):
        self.calls.append(f"pull_async {self.name}")
        out[:] = self.data[keys]
        return _Done(out)

    def push(self, keys, updates, *, copy=True):
        self.calls.append(f"push {self.name}")
        np.add.at(self.data, keys, updates)
        return _Done()


def _steps(prefetch: bool) -> tuple[list[str], np.ndarray, np.ndarray, float]:
    """One pass of a worker over a small corpus of frequent words, as word2vec's train_on runs it."""
    from pskv.apps.negatives import Negatives
    from pskv.data.text import Unigram

    calls: list[str] = []
    syn0, syn1 = _AddTable("syn0", 8, 6, calls, 1), _AddTable("syn1", 8, 6, calls, 2)
    negatives = Negatives(syn1, draw=Unigram(np.arange(8, 0, -1)).draw, rng=np.random.default_rng(3))
    step = skipgram.Step(syn0, syn1, negatives, 8, 2, prefetch=prefetch)
    corpus = Corpus(np.random.default_rng(4).integers(0, 8, 120).astype(np.int32), np.arange(0, 121, 10))
    loss = 0.0
    for words, centres, contexts in skipgram.ahead(skipgram.batches(corpus, np.ones(8), 2, 30,
                                                                    np.random.default_rng(5)),
                                                   step.prepare if step.prepares else None):
        loss += step(centres, contexts, 0.05, 0.04)
    step.close()
    return calls, syn0.data, syn1.data, loss


def test_word2vec_prefetch_pulls_the_next_batch_first_and_trains_exactly_as_before():
    """With prefetch the rows of batch i+1 are asked for before batch i pushes; the deltas of batch i
    are added to the rows both share, so every row and the loss equal those of the old order."""
    calls, syn0, syn1, loss = _steps(True)
    pulls, push = ["pull_async syn0", "pull_async syn1"], ["push syn0", "push syn1"]
    assert calls == pulls + (pulls + push) * 3 + push
    old_calls, old0, old1, old_loss = _steps(False)
    assert old_calls == (["pull_async syn0", "pull syn1"] + push) * 4
    assert loss == old_loss and np.array_equal(syn0, old0) and np.array_equal(syn1, old1)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_word2vec_with_prefetch_learns_on_two_nodes(cluster_factory, tmp_path, text_slice):
    """2 nodes x 1 thread with --prefetch (rows pulled a batch ahead, the worker's own deltas added):
    it learns as the classic runs do."""
    rows, vectors = _train(cluster_factory, tmp_path, 2, 1, "--data", str(text_slice), "--epochs", "5", "--dim",
                           "50", "--prefetch")
    _assert_learned(rows, vectors, text_slice, 5)
