"""membership.mismatch: a TableMismatch names the differing fields, not two whole specs (issue 33)."""

from pskv.membership import mismatch

SPEC = {"name": "emb", "rows": 30, "dim": 4, "dtype": "float32",
        "updater": {"name": "sgd", "lr": 0.1}, "init": {"init": "Zeros"}}


def test_between_nodes_names_each_differing_field():
    """Two fields differ: both are named with each node's value, in the spec's order."""
    other = {**SPEC, "dim": 9, "updater": {"name": "sgd", "lr": 0.5}}
    message = mismatch.between_nodes(0, {0: SPEC, 1: other})
    assert message == ("table 'emb' (declaration #0) differs between nodes: dim 4 on node 0 but 9 on node 1, "
                       "updater.lr 0.1 on node 0 but 0.5 on node 1; declare every table the same way and in the "
                       "same order on every node")


def test_between_nodes_equal_specs_is_none():
    """Equal declarations are no error."""
    assert mismatch.between_nodes(3, {0: SPEC, 1: dict(SPEC), 2: dict(SPEC)}) is None


def test_between_nodes_names_further_differing_nodes_and_absent_fields():
    """A field only one node set reads '(not set)'; other differing nodes are listed."""
    extra = {**SPEC, "consistency": "bsp"}
    message = mismatch.between_nodes(1, {0: SPEC, 1: extra, 2: {**SPEC, "rows": 31}})
    assert message.startswith("table 'emb' (declaration #1) differs between nodes: consistency (not set) on node 0 "
                              "but 'bsp' on node 1 (node(s) [2] differ from node 0 too);")


def test_joiner_names_the_field():
    """A node that joined later and declared a table differently is told which field."""
    message = mismatch.joiner(2, SPEC, 4, {**SPEC, "dtype": "float64"})
    assert message.startswith("table 'emb' (declaration #2) differs: dtype 'float32' in the cluster but 'float64' "
                              "on node 4 (node 4 joined later);")
