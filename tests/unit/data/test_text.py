"""pskv.data.text: corpus, WordSim and analogy loaders, vocabulary, sampling distributions, evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pskv.data.fetch import DataError
from pskv.data.text import (Analogy, Corpus, Unigram, Vocab, analogy_accuracy, keep_probabilities, rankdata,
                            read_analogies, read_corpus, read_vectors, read_wordsim, spearman, wordsim_spearman,
                            write_vectors)


def _write(path, text: str | bytes):
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


# ---- corpus ---------------------------------------------------------------------------------------
def test_read_corpus_splits_lines_into_sentences(tmp_path):
    """One sentence per line, tokens split on spaces and tabs, blank lines skipped."""
    path = _write(tmp_path / "c.cor", "the cat sat\n\n  on\tthe mat \r\n")
    assert read_corpus(path) == [["the", "cat", "sat"], ["on", "the", "mat"]]


def test_read_corpus_clean_lowercases_and_drops_punctuation(tmp_path):
    """clean=True keeps lower-cased word characters, with inner apostrophes and hyphens."""
    path = _write(tmp_path / "lee.cor", "Hundreds of people, in Hill Top. Argentina's well-known crisis!\n")
    assert read_corpus(path, clean=True) == [["hundreds", "of", "people", "in", "hill", "top", "argentina's",
                                              "well-known", "crisis"]]


def test_read_corpus_lapse_single_line(tmp_path):
    """Lapse's small.txt format: a single line of space-separated lower-case words is one sentence."""
    path = _write(tmp_path / "small.txt", " ".join(["a", "b"] * 500))
    assert [len(s) for s in read_corpus(path)] == [1000]


def test_read_corpus_invalid_utf8_names_file_and_line(tmp_path):
    """Bytes that are not UTF-8 raise DataError with `file:line`."""
    path = _write(tmp_path / "bad.cor", b"fine line\nsecond \xff\xfe line\n")
    with pytest.raises(DataError, match=r"bad\.cor:2: not UTF-8"):
        read_corpus(path)


def test_read_corpus_control_character_names_file_and_line(tmp_path):
    """A NUL byte (a binary file) raises DataError with `file:line` and the column."""
    path = _write(tmp_path / "bin.cor", "one\ntwo\nthree\x00four\n")
    with pytest.raises(DataError, match=r"bin\.cor:3: control character '\\x00' at column 6"):
        read_corpus(path)


def test_read_corpus_missing_file_is_a_data_error(tmp_path):
    """A missing file raises DataError naming it."""
    with pytest.raises(DataError, match="nope.cor"):
        read_corpus(tmp_path / "nope.cor")


# ---- WordSim-353 and analogies --------------------------------------------------------------------
def test_read_wordsim_skips_comments_and_header(tmp_path):
    """`#` lines and a first header line are skipped; words are lower-cased."""
    path = _write(tmp_path / "ws.tsv", "# The WordSimilarity-353 Test Collection\n# Word 1\tWord 2\tHuman (mean)\n"
                                       "Word 1\tWord 2\tHuman (mean)\nlove\tsex\t6.77\nTiger\tcat\t7.35\n")
    assert read_wordsim(path) == [("love", "sex", 6.77), ("tiger", "cat", 7.35)]


def test_read_wordsim_wrong_field_count_names_line(tmp_path):
    """A line without exactly three fields raises DataError with its line number."""
    path = _write(tmp_path / "ws.tsv", "# c\nlove\tsex\t6.77\ntiger\tcat\n")
    with pytest.raises(DataError, match=r"ws\.tsv:3: expected 3 tab-separated fields"):
        read_wordsim(path)


def test_read_wordsim_bad_score_names_line(tmp_path):
    """A non-numeric score after the first data line raises DataError with its line number."""
    path = _write(tmp_path / "ws.tsv", "love\tsex\t6.77\ntiger\tcat\thigh\n")
    with pytest.raises(DataError, match=r"ws\.tsv:2: score 'high' is not a number"):
        read_wordsim(path)


def test_read_analogies_tags_sections(tmp_path):
    """Each question carries the `: section` above it; words are lower-cased."""
    path = _write(tmp_path / "q.txt", ": capital-common-countries\nAthens Greece Baghdad Iraq\n"
                                      ": family\nboy girl brother sister\n")
    assert read_analogies(path) == [Analogy("capital-common-countries", "athens", "greece", "baghdad", "iraq"),
                                    Analogy("family", "boy", "girl", "brother", "sister")]


def test_read_analogies_three_words_names_line(tmp_path):
    """A question with other than four words raises DataError with its line number."""
    path = _write(tmp_path / "q.txt", ": family\nboy girl brother sister\nboy girl brother\n")
    with pytest.raises(DataError, match=r"q\.txt:3: an analogy has 4 words"):
        read_analogies(path)


def test_read_analogies_question_before_section(tmp_path):
    """A question before any `: section` line raises DataError with its line number."""
    path = _write(tmp_path / "q.txt", "boy girl brother sister\n")
    with pytest.raises(DataError, match=r"q\.txt:1: analogy before the first"):
        read_analogies(path)


# ---- vocabulary and corpus ------------------------------------------------------------------------
def test_vocab_min_count_and_order():
    """Words below min_count are dropped; ids go by count, then by the word itself."""
    vocab = Vocab.build([["b", "a", "c", "a"], ["b", "d", "a", "c"]], min_count=2)
    assert vocab.words == ["a", "b", "c"]
    assert vocab.counts.tolist() == [3, 2, 2]
    assert vocab.total == 7 and len(vocab) == 3 and vocab.index == {"a": 0, "b": 1, "c": 2}


def test_vocab_nothing_frequent_enough_is_a_data_error():
    """A corpus with no word reaching min_count raises DataError suggesting a lower --min-count."""
    with pytest.raises(DataError, match="min-count"):
        Vocab.build([["x", "y"]], min_count=2)


def test_vocab_encode_drops_oov_and_cuts_long_sentences():
    """encode drops unknown words and cuts sentences into pieces of at most max_sentence words."""
    vocab = Vocab(["a", "b"], np.array([5, 5]))
    corpus = vocab.encode([["a", "x", "b", "a", "b", "a"], ["y"], ["b"]], max_sentence=2)
    assert corpus.tokens.tolist() == [0, 1, 0, 1, 0, 1]
    assert corpus.offsets.tolist() == [0, 2, 4, 5, 6]
    assert corpus.num_words == 6 and corpus.num_sentences == 4


def test_corpus_shard_covers_every_sentence_once():
    """The shards are contiguous, disjoint, cover the corpus and have about equal word counts."""
    lengths = np.random.default_rng(0).integers(1, 30, 200)
    corpus = Corpus(np.arange(lengths.sum(), dtype=np.int32), np.concatenate([[0], np.cumsum(lengths)]))
    shards = [corpus.shard(i, 4) for i in range(4)]
    assert np.array_equal(np.concatenate([s.tokens for s in shards]), corpus.tokens)
    assert max(s.num_words for s in shards) - min(s.num_words for s in shards) <= 2 * 30


def test_corpus_shard_max_words_cuts_the_part_there():
    """max_words keeps the first max_words words of the part, cutting the last sentence."""
    corpus = Corpus(np.arange(100, dtype=np.int32), np.arange(0, 101, 10))
    first = corpus.shard(0, 2, max_words=25)
    assert first.offsets.tolist() == [0, 10, 20, 25] and first.tokens.tolist() == list(range(25))
    assert corpus.shard(1, 2, max_words=10).tokens.tolist() == list(range(50, 60))
    assert corpus.shard(1, 2, max_words=1000).num_words == 50


# ---- sampling distributions -----------------------------------------------------------------------
def test_keep_probabilities_match_word2vec_formula():
    """keep = min(1, (sqrt(f / (sT)) + 1) sT / f) with T the total count; rare words are always kept."""
    counts = np.array([900, 90, 9, 1])  # T = 1000, s = 0.01 -> sT = 10
    keep = keep_probabilities(counts, 0.01)
    expected = [(math.sqrt(900 / 10) + 1) * 10 / 900, (math.sqrt(90 / 10) + 1) * 10 / 90, 1.0, 1.0]
    assert np.allclose(keep, expected)
    assert keep[0] == pytest.approx(0.11652037, rel=1e-6)  # (sqrt(90) + 1) / 90


def test_keep_probabilities_sample_zero_keeps_everything():
    """sample=0 turns subsampling off."""
    assert keep_probabilities(np.array([1000, 1]), 0).tolist() == [1.0, 1.0]


def test_unigram_probabilities_are_counts_to_the_three_quarters():
    """P(w) is proportional to count(w) ** 0.75."""
    counts = np.array([16, 1, 81])
    expected = np.array([8.0, 1.0, 27.0]) / 36.0
    assert np.allclose(Unigram(counts).p, expected)


def test_unigram_alias_table_encodes_the_distribution_exactly():
    """Summing each column's accept and alias mass over the table gives back P exactly."""
    counts = np.random.default_rng(1).zipf(1.5, 500)
    unigram = Unigram(counts)
    n = len(counts)
    mass = unigram._accept / n
    np.add.at(mass, unigram._alias, (1.0 - unigram._accept) / n)
    assert np.allclose(mass, unigram.p, atol=1e-12)


def test_unigram_draws_follow_the_distribution():
    """The frequencies of a million draws are within 0.002 of P for every word."""
    unigram = Unigram(np.array([1000, 100, 10, 1, 1]))
    keys = unigram.draw(np.random.default_rng(0), 1_000_000)
    assert keys.dtype == np.int64 and keys.min() >= 0 and keys.max() < 5
    assert np.abs(np.bincount(keys, minlength=5) / len(keys) - unigram.p).max() < 0.002


# ---- Spearman and the evaluations -----------------------------------------------------------------
def test_rankdata_averages_ties():
    """Tied values share the average of their ranks."""
    assert rankdata(np.array([10, 20, 20, 5, 20])).tolist() == [2.0, 4.0, 4.0, 1.0, 4.0]


def test_spearman_hand_computed_with_ties():
    """x = 1..5, y = 5 6 7 8 7: ranks of y 1 2 3.5 5 3.5, so rho = 8 / sqrt(10 * 9.5)."""
    assert spearman(np.arange(1, 6), np.array([5, 6, 7, 8, 7])) == pytest.approx(8 / math.sqrt(95))


def test_spearman_monotone_reversed_and_constant():
    """A monotone relation gives 1, a reversed one -1, a constant input nan."""
    x = np.array([0.1, 0.5, 0.7, 2.0])
    assert spearman(x, x ** 3) == pytest.approx(1.0)
    assert spearman(x, -x) == pytest.approx(-1.0)
    assert math.isnan(spearman(x, np.ones(4)))


def test_wordsim_spearman_counts_only_in_vocabulary_pairs():
    """Cosines ordered like the human scores give 1.0; the out-of-vocabulary pair is not used."""
    vocab = Vocab(["a", "b", "c", "d"], np.array([4, 3, 2, 1]))
    angles = np.radians([0, 10, 40, 80])
    vectors = np.stack([np.cos(angles), np.sin(angles)], axis=1) * np.array([[1], [2], [3], [0.5]])
    pairs = [("a", "b", 9.0), ("a", "c", 5.0), ("a", "d", 1.0), ("a", "zzz", 7.0)]
    score = wordsim_spearman(vectors, vocab, pairs)
    assert score.value == pytest.approx(1.0) and (score.used, score.total) == (3, 4)


def test_analogy_accuracy_3cosadd_on_hand_made_vectors():
    """king - man + woman lands on queen; a question word nearest the target is skipped; OOV questions unused."""
    v = {"man": [1, 0, 0, 0, 0], "woman": [0, 1, 0, 0, 0], "king": [1, 0, 1, 0, 0], "queen": [0, 1, 1, 0, 0],
         "apple": [0, 0, 1, 0, 0], "paris": [0, 0, 0, 1, 0], "france": [0, 0, 0, 1, 0.1], "rome": [0, 0, 0, 0, 1],
         "italy": [0, 0, 0, 0.3, 1]}
    vocab = Vocab(list(v), np.arange(len(v), 0, -1))
    vectors = np.array(list(v.values()), dtype=np.float32)
    questions = [Analogy("family", "man", "king", "woman", "queen"),  # right: the target is queen's direction
                 Analogy("capital", "paris", "france", "rome", "italy"),  # rome is nearest but excluded -> italy
                 Analogy("family", "man", "king", "woman", "apple"),  # wrong: queen comes out
                 Analogy("capital", "paris", "france", "berlin", "germany")]  # not in the vocabulary
    score = analogy_accuracy(vectors, vocab, questions)
    assert (score.used, score.total) == (3, 4)
    assert score.value == pytest.approx(2 / 3)


def test_write_and_read_vectors_round_trip(tmp_path):
    """write_vectors writes word2vec's text format and read_vectors reads it back."""
    vectors = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    write_vectors(tmp_path / "v.txt", ["a", "b", "c"], vectors)
    words, back = read_vectors(tmp_path / "v.txt")
    assert words == ["a", "b", "c"] and np.allclose(back, vectors, atol=1e-5)
    assert (tmp_path / "v.txt").read_text().splitlines()[0] == "3 4"


def test_read_vectors_short_row_names_line(tmp_path):
    """A row with the wrong number of values raises DataError with its line number."""
    path = _write(tmp_path / "v.txt", "2 3\na 1 2 3\nb 1 2\n")
    with pytest.raises(DataError, match=r"v\.txt:3: expected a word and 3 numbers"):
        read_vectors(path)
