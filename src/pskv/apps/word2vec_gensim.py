"""gensim's Word2Vec beside word2vec's run (apps.word2vec `--compare-gensim`): the same sentences, vocabulary
and hyperparameters."""

from __future__ import annotations

import importlib.util
import time
from typing import Any

import numpy as np

from ..data.text import Corpus, Vocab
from .word2vec_data import evaluate


def gensim_available() -> bool:
    return importlib.util.find_spec("gensim") is not None


def train_gensim(args, vocab: Vocab, shards: list[Corpus], workers: int) -> tuple[np.ndarray, float]:
    """gensim's Word2Vec on the same sentences and vocabulary with the same hyperparameters:
    ((V, dim) float32 vectors in our word order, seconds of model.train())."""
    from gensim.models import Word2Vec

    words = np.array(vocab.words, dtype=object)
    sentences = [list(words[c.tokens[c.offsets[i] : c.offsets[i + 1]]]) for c in shards for i in range(c.num_sentences)]
    model = Word2Vec(
        sg=1,
        hs=0,
        negative=args.neg,
        window=args.window,
        vector_size=args.dim,
        alpha=args.alpha,
        min_alpha=args.min_alpha,
        sample=args.sample,
        min_count=1,
        workers=workers,
        seed=args.seed,
    )
    model.build_vocab(sentences)  # min_count=1: the sentences hold only our vocabulary's words already
    start = time.monotonic()
    model.train(sentences, total_examples=len(sentences), epochs=args.epochs)
    seconds = time.monotonic() - start
    vectors = np.zeros((len(vocab), args.dim), np.float32)  # a word of no shard (--data-words) stays 0
    known = [i for i, w in enumerate(vocab.words) if w in model.wv.key_to_index]
    vectors[known] = model.wv[[vocab.words[i] for i in known]]
    return vectors, seconds


def compare_gensim(run: Any, lines: list[str]) -> list[str]:
    """Node 0, after the cluster is gone (`run`: word2vec's _Run): gensim's run beside ours (node 0's
    `run.result`), above `lines`."""
    args, ours, workers = run.session.args, run.result, run.session.workers
    assert ours is not None  # (_finish made it)
    vectors, seconds = train_gensim(args, run.vocab, [run.shard(i) for i in range(workers)], workers)
    theirs = {
        "seconds": seconds,
        "words_per_s": args.epochs * run.epoch_words / max(seconds, 1e-9),
        **evaluate(vectors, run.vocab, run.tests),
    }
    rows = [
        ("train seconds", "{:.2f}", "seconds"),
        ("words/s", "{:,.0f}", "words_per_s"),
        ("WordSim-353 Spearman", "{}", "wordsim"),
        ("analogy accuracy", "{}", "analogy"),
    ]
    table = [f"{'':<22}{'pskv':<36}gensim, {workers} worker thread(s)"]
    table += [
        f"{name:<22}{fmt.format(ours.get(key, '-')):<36}{fmt.format(theirs.get(key, '-'))}"
        for name, fmt, key in rows
        if key in ours or key in theirs
    ]
    return table + lines
