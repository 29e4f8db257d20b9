"""Knowledge-graph loaders, id maps, the random generator, filtered ranking and the KGE kernels."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from pskv.apps.kge import batch_grads, compose, evaluate
from pskv.data.fetch import DataError
from pskv.data.kg import (Filter, filtered_ranks, index_triples, load_lapse, load_pykeen, load_recbole_kg,
                          random_kg, rank_metrics, read_id_triples, read_label_triples)


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.fixture
def pykeen_dir(tmp_path):
    _write(tmp_path / "train.txt", ["usa\tally\tuk", "uk\tally\tusa", "china\ttrade\tusa"])
    _write(tmp_path / "valid.txt", ["uk\ttrade\tchina"])
    _write(tmp_path / "test.txt", ["brazil\tally\tusa"])  # brazil appears only in test
    return tmp_path


def test_load_pykeen_splits_share_one_sorted_id_map(pykeen_dir):
    """Ids index the sorted labels of all splits, so every split uses the same map."""
    kg = load_pykeen(pykeen_dir, "tiny")
    assert kg.entities == ("brazil", "china", "uk", "usa")
    assert kg.relations == ("ally", "trade")
    assert kg.train.tolist() == [[3, 0, 2], [2, 0, 3], [1, 1, 3]]
    assert kg.valid.tolist() == [[2, 1, 1]]
    assert kg.test.tolist() == [[0, 0, 3]]
    assert kg.train.dtype == np.int64 and kg.all_triples().shape == (5, 3)


def test_index_triples_does_not_depend_on_line_order():
    """Shuffling the lines permutes the rows but keeps every label's id."""
    triples = [("a", "r", "b"), ("c", "s", "a"), ("b", "r", "c")]
    one, two = index_triples("x", {"train": triples}), index_triples("x", {"train": triples[::-1]})
    assert one.entities == two.entities and one.relations == two.relations
    assert sorted(one.train.tolist()) == sorted(two.train.tolist())


def test_read_label_triples_malformed_line_names_file_and_line(tmp_path):
    """A line without three tab-separated fields raises DataError with file:line."""
    path = _write(tmp_path / "train.txt", ["a\tr\tb", "", "a\tr b", "c\tr\td"])
    with pytest.raises(DataError, match=r"train\.txt:3: expected 3 non-empty tab-separated fields"):
        read_label_triples(path)


def test_read_label_triples_empty_field_is_malformed(tmp_path):
    """An empty head, relation or tail is a malformed line too."""
    path = _write(tmp_path / "valid.txt", ["a\t\tb"])
    with pytest.raises(DataError, match=r"valid\.txt:1"):
        read_label_triples(path)


def test_load_pykeen_reads_gzip_splits(tmp_path):
    """A split compressed as .gz is found and decompressed."""
    with gzip.open(tmp_path / "train.txt.gz", "wt") as f:
        f.write("a\tr\tb\n")
    _write(tmp_path / "valid.txt", ["b\tr\ta"])
    _write(tmp_path / "test.txt", ["a\tr\ta"])
    assert load_pykeen(tmp_path).train.tolist() == [[0, 0, 1]]


def test_load_pykeen_missing_split_is_a_data_error(tmp_path):
    """A directory without a test split raises DataError naming what it looked for."""
    _write(tmp_path / "train.txt", ["a\tr\tb"])
    _write(tmp_path / "valid.txt", ["a\tr\tb"])
    with pytest.raises(DataError, match="no test split"):
        load_pykeen(tmp_path)


def test_load_recbole_kg_finds_columns_by_header_and_splits_seen_ids(tmp_path):
    """Columns come from the typed header; valid/test only hold ids that train has."""
    rows = [f"e{i % 40}\tr{i % 3}\te{(i * 7 + 1) % 40}" for i in range(400)]
    path = _write(tmp_path / "g.kg", ["relation_id:token\thead_id:token\ttail_id:token"]
                  + ["\t".join([r.split("\t")[1], r.split("\t")[0], r.split("\t")[2]]) for r in rows])
    kg = load_recbole_kg(path, seed=1, held_out=0.1)
    assert len(kg.train) + len(kg.valid) + len(kg.test) == len(set(rows))
    assert len(kg.valid) > 0 and len(kg.test) > 0
    assert set(kg.relations) == {"r0", "r1", "r2"}
    seen = set(kg.train[:, 0]) | set(kg.train[:, 2])
    for split in (kg.valid, kg.test):
        assert set(split[:, 0]) <= seen and set(split[:, 2]) <= seen
    again = load_recbole_kg(path, seed=1, held_out=0.1)
    assert np.array_equal(kg.test, again.test)


def test_load_recbole_kg_bad_header_and_bad_line(tmp_path):
    """A header without head_id/relation_id/tail_id, or a short line, raises DataError with the line."""
    bad_header = _write(tmp_path / "a.kg", ["h:token\tr:token\tt:token", "x\ty\tz"])
    with pytest.raises(DataError, match=r"a\.kg:1: expected a recbole header"):
        load_recbole_kg(bad_header)
    bad_line = _write(tmp_path / "b.kg", ["head_id:token\trelation_id:token\ttail_id:token", "x\ty\tz", "x\ty"])
    with pytest.raises(DataError, match=r"b\.kg:3"):
        load_recbole_kg(bad_line)


def test_load_lapse_keeps_ids_and_counts_them(tmp_path):
    """Lapse's .del files keep their integer ids; sizes are max id + 1 over all splits."""
    _write(tmp_path / "train.del", ["0\t0\t1", "2\t1\t3"])
    _write(tmp_path / "valid.del", ["4\t0\t1"])
    _write(tmp_path / "test.del", ["1\t2\t0"])
    kg = load_lapse(tmp_path)
    assert (kg.num_entities, kg.num_relations) == (5, 3)
    assert kg.train.tolist() == [[0, 0, 1], [2, 1, 3]] and kg.test.tolist() == [[1, 2, 0]]


def test_read_id_triples_rejects_non_integer_ids(tmp_path):
    """A negative or non-numeric id raises DataError with file and line."""
    path = _write(tmp_path / "train.del", ["0\t0\t1", "0\t-1\t1"])
    with pytest.raises(DataError, match=r"train\.del:2: expected three non-negative integer ids"):
        read_id_triples(path)


def test_random_kg_is_seeded_distinct_and_in_range():
    """Same seed, same graph; ids in range; no triple twice; splits of the asked size."""
    a, b, c = random_kg(500, 7, 4000, seed=3), random_kg(500, 7, 4000, seed=3), random_kg(500, 7, 4000, seed=4)
    assert np.array_equal(a.train, b.train) and not np.array_equal(a.train, c.train)
    every = a.all_triples()
    assert len(every) == 4000 and len(a.valid) == len(a.test) == 200
    assert every[:, [0, 2]].max() < 500 and every[:, 1].max() < 7 and every.min() >= 0
    assert len(np.unique(every, axis=0)) == len(every)
    assert (a.num_entities, a.num_relations) == (500, 7)


def test_random_kg_has_hot_entities_and_learnable_structure():
    """Heads are skewed (the top 1% of entities are >= 5% of heads); each (relation, head group)
    sends its tails to one group, so tails of a relation are far from uniform."""
    kg = random_kg(2000, 5, 20000, seed=0)
    counts = np.sort(np.bincount(kg.train[:, 0], minlength=2000))[::-1]
    assert counts[:20].sum() >= 0.05 * counts.sum()
    assert len(np.unique(kg.train[kg.train[:, 1] == 0][:, 2])) < 2000


def test_random_kg_rejects_bad_sizes():
    """Fewer than 2 entities, or a skew outside [0, 1), is a ValueError."""
    with pytest.raises(ValueError):
        random_kg(1, 1, 1)
    with pytest.raises(ValueError):
        random_kg(10, 1, 5, skew=1.0)


def test_filtered_ranks_hand_made_example():
    """Known ranks: other true answers are dropped, higher scores count 1 and ties 1/2."""
    scores = np.array([[0.9, 0.5, 0.7, 0.1],   # target 1 (0.5); 0 and 2 higher, 0 is a known answer -> 2
                       [0.3, 0.3, 0.3, 0.8],   # target 0; 3 higher, 1 and 2 tie -> 1 + 1 + 1 = 3
                       [0.2, 0.1, 0.4, 0.3]])  # target 2 is the best -> 1
    targets = np.array([1, 0, 2])
    offsets = np.array([0, 2, 3, 4])
    known = np.array([0, 1, 0, 2])  # row 0 knows 0 and 1 (itself), row 1 itself, row 2 itself
    assert filtered_ranks(scores, targets, offsets, known).tolist() == [2.0, 3.0, 1.0]
    assert scores[0, 0] == 0.9  # the input is not changed
    m = rank_metrics(np.array([2.0, 3.0, 1.0]))
    assert m["mrr"] == pytest.approx((1 / 2 + 1 / 3 + 1) / 3)
    assert (m["hits@1"], m["hits@3"], m["hits@10"]) == (pytest.approx(1 / 3), 1.0, 1.0)


def test_filter_answers_lists_known_tails_and_heads():
    """Filter.answers gives, per query triple, every known tail of (h, r) or head of (r, t)."""
    triples = np.array([[0, 0, 1], [0, 0, 2], [3, 0, 2], [0, 1, 3]])
    f = Filter(triples, num_entities=4, num_relations=2)
    offsets, tails = f.answers(np.array([[0, 0, 1], [2, 1, 2]]), "tail")
    assert offsets.tolist() == [0, 2, 2] and sorted(tails.tolist()) == [1, 2]
    offsets, heads = f.answers(np.array([[0, 0, 2]]), "head")
    assert sorted(heads[offsets[0]:offsets[1]].tolist()) == [0, 3]


def test_evaluate_matches_a_brute_force_loop():
    """evaluate() on ComplEx equals a per-candidate loop with complex arithmetic and a set filter."""
    kg = random_kg(30, 3, 300, seed=2, held_out=0.1)
    rng = np.random.default_rng(0)
    E, R = rng.normal(size=(30, 8)).astype(np.float32), rng.normal(size=(3, 8)).astype(np.float32)
    every = {tuple(t) for t in kg.all_triples().tolist()}
    c = lambda x: x[:4].astype(np.float64) + 1j * x[4:]  # noqa: E731
    score = lambda h, r, t: np.real(np.sum(c(E[h]) * c(R[r]) * np.conj(c(E[t]))))  # noqa: E731
    rr = 0.0
    for h, r, t in kg.test.tolist():
        for cands, true in (([(h, r, e) for e in range(30)], (h, r, t)), ([(e, r, t) for e in range(30)], (h, r, t))):
            s = score(*true)
            others = [score(*x) for x in cands if x not in every]
            rr += 1 / (1 + sum(o > s + 1e-5 for o in others) + 0.5 * sum(abs(o - s) <= 1e-5 for o in others))
    sums = evaluate(E, R, kg.test, Filter(kg.all_triples(), 30, 3), "complex")
    assert sums[4] == 2 * len(kg.test)
    assert sums[0] == pytest.approx(rr, rel=1e-4)


@pytest.mark.parametrize("model", ["complex", "distmult"])
def test_compose_scores_are_the_model_scores(model):
    """dot(compose(h, r, tail), t) and dot(compose(t, r, head), h) are both the model's score."""
    rng = np.random.default_rng(1)
    h, r, t = rng.normal(size=(3, 5, 6))
    if model == "complex":
        c = lambda x: x[:, :3] + 1j * x[:, 3:]  # noqa: E731
        expected = np.real(np.sum(c(h) * c(r) * np.conj(c(t)), 1))
    else:
        expected = np.sum(h * r * t, 1)
    assert np.allclose(np.sum(compose(h, r, model, "tail") * t, 1), expected)
    assert np.allclose(np.sum(compose(t, r, model, "head") * h, 1), expected)


@pytest.mark.parametrize("cplx", [True, False])
@pytest.mark.parametrize("ce", [True, False])
@pytest.mark.parametrize("reg", [0, 1, 2])
def test_batch_grads_match_finite_differences(cplx, ce, reg):
    """The kernel's gradients are those of its loss (central differences, float64), with a
    negative equal to the true entity ignored."""
    rng = np.random.default_rng(7)
    b, d, n = 2, 4, 3
    pos, rel, neg = rng.normal(size=(2 * b, d)), rng.normal(size=(b, d)), rng.normal(size=(b * 2 * n, d))
    pos_ids, neg_ids = np.arange(2 * b), rng.integers(0, 6, b * 2 * n)
    neg_ids[0] = pos_ids[b]  # a "negative" that is the true tail of triple 0

    def loss(*grads):
        grads = grads or [np.empty_like(x) for x in (pos, rel, neg)]
        return batch_grads(pos, rel, neg, pos_ids, neg_ids, n, cplx, ce, reg, 0.1, *grads)

    grads = [np.empty_like(x) for x in (pos, rel, neg)]
    loss(*grads)
    assert not grads[2][0].any()  # the ignored negative gets no gradient
    for array, grad in zip((pos, rel, neg), grads):
        for idx in np.ndindex(array.shape):
            old = array[idx]
            array[idx] = old + 1e-6
            up = loss()
            array[idx] = old - 1e-6
            down = loss()
            array[idx] = old
            assert (up - down) / 2e-6 == pytest.approx(grad[idx], abs=1e-6)
