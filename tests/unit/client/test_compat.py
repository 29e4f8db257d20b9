"""What composes (pskv.client.compat, pskv.client.matrix): docs/compatibility.md is current, every
cell of the matrix is decided, every test it names exists, and each refused pair is refused where the
matrix says, with an error that names both sides."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import pskv
from pskv.client import compat, matrix

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "compatibility.md"
_ONE_PROCESS = {"backups", "join"}  # (sides a 1-node pskv.init() cannot have: the check function says those)


def test_the_compatibility_doc_is_current():
    """docs/compatibility.md is what `python -m pskv.client.matrix` writes now."""
    assert DOC.read_text() == matrix.render(), "docs/compatibility.md is stale: run python -m pskv.client.matrix"
    assert matrix.main(["--check", str(DOC)]) == 0


def test_every_cell_of_the_matrix_is_decided():
    """Each (row, column) is refused, supported with a test, or of no effect; none is left blank."""
    assert matrix.undecided() == []
    assert "| ? " not in matrix.render() and "; ?" not in matrix.render()


def test_every_test_the_matrix_names_exists():
    """Each named test is a file of tests/ that defines the function (parameters stripped)."""
    missing = []
    for named in matrix.tests_named():
        for one in named.split(", "):
            path, _, func = one.partition("::")
            func = re.sub(r"\[.*", "", func)  # (a parametrized test's id)
            file = ROOT / path
            if not file.exists() or (func and f"def {func}(" not in file.read_text()):
                missing.append(one)
    assert missing == []


def _declare_kwargs(side: str, tmp_path: Path) -> dict:
    """node.table() keywords that switch `side` on."""
    return {"sparse": {"key_space": "uint64", "rows": None},
            "disk": {"storage": "disk", "cache_rows": 4, "path": tmp_path},
            "Relocate": {"placement": pskv.Relocate(location_caches=True)},
            "Replicate": {"replicate": pskv.Replicate(keys=[1])},
            "Sampling": {"sampling": pskv.Sampling(np.ones(8))},
            "NodeAggregate": {"aggregate": pskv.NodeAggregate()},
            "BSP/SSP": {"consistency": pskv.SSP(1)},
            "filters": {"filters": "keycache"}}[side]


_DECLARED = [r for r in compat.REFUSED if r.where == "declaration" and r.by == "node.table"]


@pytest.mark.parametrize("refusal", [r for r in _DECLARED if not {r.a, r.b} & _ONE_PROCESS],
                         ids=lambda r: f"{r.a}-{r.b}")
def test_each_declaration_refusal_raises_a_config_error_naming_both_sides(node, tmp_path, refusal):
    """node.table() with both sides raises ConfigError naming both, before anything is declared."""
    kwargs = {"rows": 8, **_declare_kwargs(refusal.a, tmp_path), **_declare_kwargs(refusal.b, tmp_path)}
    with pytest.raises(pskv.ConfigError) as info:
        node.table("t", dim=2, **kwargs)
    text = str(info.value)
    assert compat.LABEL[refusal.a] in text and compat.LABEL[refusal.b] in text and refusal.reason in text, text
    assert list(tmp_path.iterdir()) == []  # (a disk table made no file)
    assert node.table("t", rows=8).rows == 8  # the name is still free


@pytest.mark.parametrize("refusal", [r for r in _DECLARED if {r.a, r.b} & _ONE_PROCESS], ids=lambda r: f"{r.a}-{r.b}")
def test_refusals_that_need_a_cluster_are_said_by_the_declaration_check(refusal):
    """The pairs with backups or a joined node: node.table() runs this check with the cluster's facts."""
    with pytest.raises(pskv.ConfigError) as info:
        compat.check_declaration("t", {refusal.a, refusal.b} | ({"backups"} if refusal.only == "with backups" else set()))
    assert compat.LABEL[refusal.a] in str(info.value) and compat.LABEL[refusal.b] in str(info.value)
    if refusal.only == "with backups":  # (a pair refused only with backups passes without them)
        compat.check_declaration("t", {refusal.a, refusal.b})
    compat.check_declaration("t", {"dense", refusal.b if refusal.a == "sparse" else "dense"} - {"sparse", "disk"})
    refused = compat.call_refusals("t", {"dense", "backups"})  # (and push_pull, at the call, with backups)
    assert refused == {"push_pull": "push_pull on table 't': not with backups (pskv.init(backups=B)): with backups "
                                    "a write is answered by its chain's tail (ACK), not with rows; use push() then "
                                    "pull() there"}


def test_declared_reads_the_deprecated_keywords_too():
    """The names node.table() checks, from old spellings as well as the option objects."""
    on = compat.declared(key_space="dense", storage="memory", placement=None, replicate=[1, 2], sampling=None,
                         aggregate="node", consistency=pskv.BSP(), filters=None, old={"location_caches": True},
                         backups=1, joined=True)
    assert on == {"dense", "Replicate", "NodeAggregate", "BSP/SSP", "Relocate", "backups", "join"}


def test_a_sparse_table_takes_bsp_and_ssp_with_a_push_buffer_and_no_row_cache(node):
    """Sparse x BSP/SSP is no longer refused: the table gets a push buffer (sized by Cache's
    buffer_rows) and no row cache (Cache's rows are inert); only push_pull stays refused."""
    assert compat.refusals("sparse", "BSP/SSP") == []
    node.table("t", rows=None, dim=2, key_space="uint64", consistency=pskv.BSP(), cache=pskv.Cache(rows=8, buffer_rows=3))
    state = node.catalog.get("t")
    assert state.cache is None and state.buffer.capacity == 3
    assert [c for c, s in state.stages().items() if s == "refused"] == ["push_pull", "localize", "pull_if_local",
                                                                        "prepare_sample"]


_CALLS = [r for r in compat.REFUSED if r.where == "call" and r.a != "backups"]


@pytest.mark.parametrize("refusal", _CALLS, ids=lambda r: f"{r.a}-{r.b}")
def test_each_call_refusal_raises_a_table_error_naming_the_option(node, tmp_path, refusal):
    """A call the table's options do not take raises TableError naming the call and the option; nothing changes."""
    kwargs = {"rows": 8, **_declare_kwargs(refusal.a, tmp_path)}
    t = node.table("t", dim=2, **kwargs)
    keys = np.array([1, 2], np.uint64 if refusal.a == "sparse" else np.int64)
    call = {"localize": lambda: t.localize(keys), "prepare_sample": lambda: t.prepare_sample(4),
            "pull_if_local": lambda: t.pull_if_local(keys),
            "push_pull": lambda: t.push_pull(keys, np.ones((2, 2), np.float32))}[refusal.b]
    with pytest.raises(pskv.TableError) as info:
        call()
    assert str(info.value).startswith(f"{refusal.b} on table 't': not with {compat.LABEL[refusal.a]}: {refusal.reason}")
    assert node.catalog.get("t").stages()[refusal.b] == "refused"
    assert (node._main_worker.table("t").pull(keys) == 0).all()


def test_leave_refuses_aggregated_tables_without_backups(tmp_path):
    """node.leave() refuses what compat lists at leave() (node.elastic.check_leave), before anything moves."""
    assert [(r.a, r.only) for r in compat.REFUSED if r.where == "leave()"] == [("NodeAggregate", "without backups")]
    with pskv.init() as node:
        node.table("t", dim=2, **{"rows": 8, **_declare_kwargs("NodeAggregate", tmp_path)})
        with pytest.raises(pskv.ConfigError, match=r"node 0: leave\(\) .*\['t'\]"):
            node.leave()
        assert node.members == [0]
