"""The apps on users' own files (written here, a dozen lines each): `pskv run APP -- --data PATH` completes,
`--out` writes a model that a plain process loads back and that reproduces the metric the app printed,
and a malformed file stops the app with status 2, a DataError naming file and line, and nothing written."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from pskv.apps import kge, mf, word2vec
from pskv.data import ratings
from pskv.data.kg import Filter, load

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PEOPLE = ["ann", "bob", "cid", "dan", "eve", "fay"]


def _pskv_run(tmp_path, app: str, *args: str) -> subprocess.CompletedProcess:
    """`pskv run APP -- ARGS` on 1 node, with an empty data cache (so nothing fetched decides the output)."""
    env = {**os.environ, "PSKV_DATA_DIR": str(tmp_path / "empty-cache")}
    return subprocess.run([sys.executable, "-m", "pskv", "run", app, "--", "--progress", "none", *args],
                          capture_output=True, text=True, timeout=100, env=env)


def _ok(proc: subprocess.CompletedProcess) -> list[str]:
    """The node's output lines (the launcher's `[node 0] ` prefix taken off); asserts status 0."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [re.sub(r"^\[node 0\] ", "", line) for line in (proc.stdout + proc.stderr).splitlines()]


def _line(lines: list[str], start: str) -> str:
    """The one line that starts with `start`."""
    found = [line for line in lines if line.startswith(start)]
    assert len(found) == 1, lines
    return found[0]


def _lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---- kge ------------------------------------------------------------------------------------------------------
def _libkge(d):
    """A LibKGE directory: 6 people, 2 relations, 12 + 2 + 3 triples of ids with names."""
    d.mkdir()
    _lines(d / "entity_ids.del", [f"{i}\t/p/{name}" for i, name in enumerate(PEOPLE)])
    _lines(d / "relation_ids.del", ["0\tknows", "1\tlikes"])
    _lines(d / "train.del", [f"{i}\t{i % 2}\t{(i + 1 + i % 2) % 6}" for i in range(6)]
           + [f"{i}\t{1 - i % 2}\t{(i + 3) % 6}" for i in range(6)])
    _lines(d / "valid.del", ["0\t0\t2", "3\t1\t1"])
    _lines(d / "test.del", ["1\t0\t3", "4\t1\t0", "5\t0\t2"])
    return d


KGE = ["--epochs", "3", "--dim", "8", "--neg", "2", "--batch", "4", "--eval-every", "0"]


def test_kge_on_a_libkge_directory_out_reproduces_the_printed_test_mrr(tmp_path):
    """kge on a LibKGE directory; load_embeddings(--out) names every row, and the loaded rows give
    the test MRR the app printed, to its last digit."""
    data, out = _libkge(tmp_path / "kg"), tmp_path / "emb"
    lines = _ok(_pskv_run(tmp_path, "kge", "--data", str(data), *KGE, "--out", str(out)))
    assert _line(lines, "embeddings: ") == f"embeddings: {out}/ (pskv.apps.kge.load_embeddings)"
    emb = kge.load_embeddings(out)
    kg = load(str(data))
    assert emb.entities == [f"/p/{name}" for name in PEOPLE] and emb.relations == ["knows", "likes"]
    assert (emb.E.shape, emb.R.shape, emb.model) == ((6, 8), (2, 8), "complex")
    assert emb.ids([("/p/bob", "knows", "/p/dan")]).tolist() == kg.test[:1].tolist()
    sums = kge.evaluate(emb.E, emb.R, kg.test, Filter(kg.all_triples(), 6, 2), emb.model)
    assert _line(lines, "test MRR ") == f"test MRR {sums[0] / sums[4]:.4f}"
    assert emb.meta["test"]["mrr"] == pytest.approx(sums[0] / sums[4], rel=1e-12)


def test_kge_on_one_tsv_file_splits_it_and_completes(tmp_path):
    """One file of labelled triples with a header: split by --seed, trained, test MRR printed."""
    rows = [f"{PEOPLE[i % 6]}\t{('likes', 'knows')[i // 6]}\t{PEOPLE[(i * 5 + 1 + i // 6) % 6]}" for i in range(12)]
    data = _lines(tmp_path / "people.tsv", ["head\trelation\ttail"] + rows)
    lines = _ok(_pskv_run(tmp_path, "kge", "--data", str(data), *KGE, "--seed", "1"))
    kg = load(str(data), seed=1)
    assert (len(kg.train), len(kg.valid), len(kg.test)) == (10, 1, 1) and "head" not in kg.entities
    assert _line(lines, "kge: complex on ").startswith(f"kge: complex on {kg!r}, dim 8")
    assert re.fullmatch(r"test MRR \d\.\d{4}", _line(lines, "test MRR "))


# ---- mf -------------------------------------------------------------------------------------------------------
RATINGS = ["userId,movieId,rating,timestamp"] + [f"u{u},m{(u * 3 + k) % 5},{1 + (u + k) % 5},0"
                                                  for u in range(4) for k in range(3)]


@pytest.mark.parametrize("schedule", ["free", "ccd"])
def test_mf_on_a_csv_out_reproduces_the_printed_test_rmse(tmp_path, schedule):
    """mf on a CSV with a header and string ids; load_factors(--out) predicts by those ids and
    gives the test RMSE the app printed (to its 4 decimals)."""
    data, out = _lines(tmp_path / "r.csv", RATINGS), tmp_path / "factors"
    lines = _ok(_pskv_run(tmp_path, "mf", "--data", str(data), "--rank", "2", "--epochs", "3", "--batch", "4",
                          "--test-fraction", "0.25", "--schedule", schedule, "--out", str(out)))
    printed = float(_line(lines, "test RMSE ").removeprefix("test RMSE "))
    factors = mf.load_factors(out)
    assert factors.users == ["u0", "u1", "u2", "u3"] and factors.items == ["m0", "m1", "m2", "m3", "m4"]
    assert factors.meta["clip"] == [1.0, 5.0] and factors.U.shape == (4, 2)
    _, test = ratings.split(ratings.load_file(data), test_fraction=0.25, seed=0)
    assert len(test) == 3
    pred = factors.predict(test.user_tokens[test.users], test.item_tokens[test.items])
    assert abs(np.sqrt(np.mean((pred - test.values) ** 2)) - printed) <= 5e-5 + 1e-7


# ---- word2vec -------------------------------------------------------------------------------------------------
SENTENCES = ["the king rules the land", "the queen rules the land", "a man walks to the town",
             "a woman walks to the town", "the king and the queen", "the man and the woman",
             "king man queen woman", "the land and the town"]


def test_word2vec_on_a_directory_out_reproduces_the_printed_scores(tmp_path):
    """word2vec on a directory of two text files, with the user's own word pairs and analogies;
    load_vectors(--out) gives back the vectors, whose scores are the printed ones."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _lines(corpus / "a.txt", SENTENCES[:4])
    _lines(corpus / "b.txt", SENTENCES[4:])
    pairs = _lines(tmp_path / "pairs.tsv", ["king\tqueen\t9", "man\twoman\t8", "king\tland\t3",
                                            "town\tqueen\t1", "walks\trules\t5"])
    questions = _lines(tmp_path / "questions.txt", [": gender", "king queen man woman", "man woman king queen"])
    out = tmp_path / "vectors.txt"
    lines = _ok(_pskv_run(tmp_path, "word2vec", "--data", str(corpus), "--min-count", "1", "--dim", "8",
                          "--window", "2", "--neg", "2", "--epochs", "3", "--batch-words", "20", "--sample", "0",
                          "--wordsim", str(pairs), "--analogies", str(questions), "--out", str(out)))
    vocab, vectors = word2vec.load_vectors(out)
    assert vectors.shape == (len(vocab), 8) and vocab.words[0] == "the" and len(vocab) == 12
    scores = word2vec.evaluate(vectors, vocab, word2vec.load_tests(pairs, questions))
    assert _line(lines, "analogy accuracy") == f"analogy accuracy (3CosAdd) {scores['analogy']}"
    assert _line(lines, "word similarity") == f"word similarity (pairs.tsv) Spearman {scores['wordsim']}"
    assert str(scores["wordsim"]).endswith("(5/5 in vocabulary)")


# ---- malformed input: status 2, file and line, nothing written --------------------------------------------------
MALFORMED = {  # app -> [(file name, content, what the error says)]
    "kge": [("bad.tsv", "a\tr\tb\na\tr\n", r"bad.tsv:2: expected 3 non-empty tab-separated fields"),
            ("bad.tsv", "", r"bad.tsv:1: the file has no triples"),
            ("kg/train.del", "0\t0\t1\n0\tx\t1\n", r"train.del:2: expected three non-negative integer ids")],
    "mf": [("bad.csv", "1,2,3\n1,2\n", r"bad.csv line 2: '1,2' has 2 field(s)"),
           ("bad.csv", "1,2,3\n1,2,five\n", r"bad.csv line 2: 'five' is not a number"),
           ("bad.csv", "", r"bad.csv line 1: no ratings in the file")],
    "word2vec": [("bad.txt", "", r"bad.txt:1: no words in the file"),
                 ("bad.txt", "words\n\x01\n", r"bad.txt:2: control character")],
}
CASES = [(app, *case) for app, cases in MALFORMED.items() for case in cases]


def _main_args(app: str, data, out) -> list[str]:
    return ["--data", str(data), "--out", str(out)] + (["--min-count", "1"] if app == "word2vec" else [])


@pytest.mark.timeout(30)
@pytest.mark.parametrize("app, name, content, message", CASES)
def test_malformed_file_is_status_2_with_file_and_line_and_nothing_written(tmp_path, capsys, app, name, content,
                                                                          message):
    """The app's main() (what each node runs) returns 2 before joining a cluster; the message
    names the file and the line; --out is not created."""
    data = tmp_path / name
    data.parent.mkdir(exist_ok=True)
    data.write_text(content)
    if name.startswith("kg/"):  # the other files of a LibKGE directory, well formed
        for other, text in [("entity_ids.del", "0\ta\n1\tb\n"), ("relation_ids.del", "0\tr\n"),
                            ("valid.del", "0\t0\t1\n"), ("test.del", "1\t0\t0\n")]:
            (data.parent / other).write_text(text)
        data = data.parent
    status = {"kge": kge.main, "mf": mf.main, "word2vec": word2vec.main}[app](_main_args(app, data, tmp_path / "out"))
    err = capsys.readouterr().err
    assert status == 2 and f"pskv run {app}: error: " in err and message in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("app", list(MALFORMED))
def test_malformed_file_through_pskv_run_exits_2(tmp_path, app):
    """The same through `pskv run APP`: the launcher's status is the node's 2, the error reaches the user."""
    name, content, message = MALFORMED[app][0]
    data = tmp_path / name
    data.write_text(content)
    proc = _pskv_run(tmp_path, app, *_main_args(app, data, tmp_path / "out"))
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert message in proc.stdout + proc.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("app", ["lr", "lasso"])
def test_lr_and_lasso_refuse_a_malformed_libsvm_file_with_status_2(tmp_path, app):
    """The DataError names the file and line; the run ends with status 2 and a one-line error, no traceback."""
    bad = tmp_path / "bad.libsvm"
    bad.write_text("1 1:0.5 2:1\n0 1:1 3:2\n1 4:oops\n")
    extra = ["--test", str(bad)] if app == "lr" else []
    proc = subprocess.run([sys.executable, "-m", "pskv", "run", app, "--", "--data", str(bad), *extra,
                           "--epochs", "1", "--progress", "none"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert f"pskv run {app}: error: {bad}:3:" in out and "Traceback" not in out, out[-2000:]
