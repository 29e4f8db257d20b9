"""What composes with what: the one place that holds every refused pair of a table kind, option,
call or cluster event, with where it is refused and why; and the matrix docs/compatibility.md shows.

    check_declaration(name, on)      node.table(): ConfigError naming both sides of a refused pair
    call_refusals(name, on)          client.path: the calls this table refuses (TableError), with why
    python -m pskv.client.matrix [--check]    writes (or checks) docs/compatibility.md from it

`on` is the set of names that apply to a table: its kind ("dense", "sparse", "disk"), its options
("Relocate": location caches; "Replicate", "Sampling", "NodeAggregate", "BSP/SSP", "filters") and
the cluster's facts ("backups"; "join": this node joined the running cluster; "shared memory", which
nothing refuses: the matrix shows where it has an effect). "intent" (table.intent, client.intents)
is refused nowhere either: a table whose keys do not move ignores it. Refusals enforced
elsewhere (`by`) are listed here too, so that the matrix is whole: the coordinator's join
refusals, node.elastic.check_leave, and options.TableOptions (which no longer sees its pairs:
node.table checks them first).
"""

from __future__ import annotations

import dataclasses

from ..errors import ConfigError, TableError

KINDS = ("dense", "sparse", "disk")
OPTIONS = ("Relocate", "Replicate", "Sampling", "NodeAggregate", "BSP/SSP", "Cache", "filters")
EVENTS = ("push_pull", "intent", "backups", "shared memory", "checkpoint", "restore", "join", "leave")
CALLS = {"localize": "Relocate", "prepare_sample": "Sampling", "push_pull": "push_pull", "pull_if_local": None}

# how an error message names each side (what the user wrote)
LABEL = {
    "dense": "a dense table",
    "sparse": "key_space='uint64'",
    "disk": "storage='disk'",
    "Relocate": "placement=pskv.Relocate(location_caches=True)",
    "Replicate": "replicate=pskv.Replicate(...)",
    "Sampling": "sampling=pskv.Sampling(...)",
    "NodeAggregate": "aggregate=pskv.NodeAggregate()",
    "BSP/SSP": "consistency=pskv.BSP()/SSP(s)",
    "Cache": "cache=pskv.Cache(...)",
    "filters": "filters=",
    "backups": "backups (pskv.init(backups=B))",
    "shared memory": "shared memory (PSKV_SHARED_MEMORY=1)",
    "join": "a node that joined the running cluster",
    "leave": "node.leave()",
    "localize": "localize",
    "prepare_sample": "prepare_sample",
    "push_pull": "push_pull",
    "pull_if_local": "pull_if_local",
    "intent": "table.intent",
}


class Incompatible(ConfigError, TableError):
    """A pair of table options (or an option and the cluster) that does not compose, refused when
    the table is declared. A ConfigError; also a TableError, as the option pairs raised before."""


@dataclasses.dataclass(frozen=True)
class Refusal:
    """Pair (a, b) is refused `where` ("declaration", "call", "join", "leave()"), by the code `by`, because
    `reason`; `test` shows it. `only`: the condition under which it holds ("" always)."""

    a: str
    b: str
    where: str
    reason: str
    by: str
    test: str
    only: str = ""


_SPARSE = "sparse tables keep each key at its range's node"
_AGG = "an aggregated table keeps its static placement (one technique per table)"
_ROUNDS = "a BSP/SSP or NodeAggregate table sends its pushes in rounds of its own"
_TEST = "tests/unit/client/test_compat.py::"
_DECL = _TEST + "test_each_declaration_refusal_raises_a_config_error_naming_both_sides"
_CHECK = _TEST + "test_refusals_that_need_a_cluster_are_said_by_the_declaration_check"
_CALL = _TEST + "test_each_call_refusal_raises_a_table_error_naming_the_option"
_LEAVE = _TEST + "test_leave_refuses_aggregated_tables_without_backups"

REFUSED: tuple[Refusal, ...] = (
    Refusal("sparse", "Relocate", "declaration", f"{_SPARSE}: nothing to remember where it moved", "node.table", _DECL),
    Refusal("sparse", "localize", "call", _SPARSE, "client.path", _CALL),
    Refusal("sparse", "Replicate", "declaration", f"{_SPARSE}: no slot map for hot-key copies", "node.table", _DECL),
    Refusal("sparse", "Sampling", "declaration", f"{_SPARSE}; sampling draws row ids 0..rows-1", "node.table", _DECL),
    Refusal("sparse", "prepare_sample", "call", "sampling needs a dense table (rows 0..n-1)", "client.path", _CALL),
    Refusal("sparse", "NodeAggregate", "declaration", f"{_SPARSE}: no per-row round arrays", "node.table", _DECL),
    Refusal(
        "sparse",
        "join",
        "declaration",
        "with backups a joiner would end the chains of sparse ranges, "
        "which no test shows yet (server.sparse_copies); join without backups, or use dense tables",
        "node.table",
        _CHECK,
        only="with backups",
    ),
    Refusal("sparse", "pull_if_local", "call", "use pull (local keys are read from memory)", "client.path", _CALL),
    Refusal("disk", "sparse", "declaration", "disk tables are dense tables for now", "node.table", _DECL),
    Refusal(
        "disk",
        "backups",
        "declaration",
        "disk tables are dense tables without backups for now: chain snapshots copy rows in memory",
        "node.table",
        _CHECK,
    ),
    Refusal("NodeAggregate", "Replicate", "declaration", _AGG, "node.table", _DECL),
    Refusal("NodeAggregate", "Relocate", "declaration", _AGG, "node.table", _DECL),
    Refusal("NodeAggregate", "localize", "call", _AGG, "client.path", _CALL),
    Refusal(
        "NodeAggregate",
        "join",
        "join",
        "its level-2 arrays are sized by the nodes the cluster started with "
        "(the coordinator refuses a joiner while such a table is declared or being declared, and the "
        "declaration of one once a joiner is a member, on every node)",
        "membership.joining",
        "tests/unit/membership/test_declare_during_change.py::"
        "test_an_aggregated_table_declared_after_a_join_is_refused_on_every_node",
    ),
    Refusal(
        "NodeAggregate",
        "leave",
        "leave()",
        "without backups nothing moves the aggregation state; start the cluster with backups=1",
        "node.elastic.check_leave",
        _LEAVE,
        only="without backups",
    ),
    Refusal(
        "filters",
        "BSP/SSP",
        "declaration",
        f"filters= shape the messages of asynchronous tables; {_ROUNDS}",
        "node.table",
        _DECL,
    ),
    Refusal(
        "filters",
        "NodeAggregate",
        "declaration",
        f"filters= shape the messages of asynchronous tables; {_ROUNDS}",
        "node.table",
        _DECL,
    ),
    Refusal(
        "filters",
        "backups",
        "declaration",
        "with backups every write travels its range's chain as it is (client.backed sends no filters)",
        "node.table",
        _CHECK,
    ),
    Refusal(
        "Replicate",
        "push_pull",
        "call",
        "a replicated key's push is applied to this node's copy, not at an owner that could answer its row",
        "client.path",
        _CALL,
    ),
    Refusal(
        "BSP/SSP", "push_pull", "call", "a BSP/SSP push waits in the push buffer until the clock", "client.path", _CALL
    ),
    Refusal(
        "NodeAggregate", "push_pull", "call", "an aggregated push is answered by the round's pull", "client.path", _CALL
    ),
    Refusal(
        "backups",
        "push_pull",
        "call",
        "with backups a write is answered by its chain's tail (ACK), not with rows",
        "client.path",
        _CHECK,
    ),
)


def declared(
    *,
    key_space: str,
    storage: str,
    placement,
    replicate,
    sampling,
    aggregate,
    consistency,
    filters,
    old: dict,
    backups: int,
    joined: bool,
) -> set[str]:
    """The names (module docstring) that a node.table() call's arguments switch on, read before the
    options are parsed (deprecated spellings too: `location_caches=`, `replicate=KEYS`, `aggregate="node"`)."""
    caches = bool(getattr(placement, "location_caches", False) or old.get("location_caches"))
    on = {"sparse" if key_space == "uint64" else "disk" if storage == "disk" else "dense"}
    if key_space == "uint64" and storage == "disk":
        on.add("disk")
    on |= {
        name
        for name, used in (
            ("Relocate", caches),
            ("Replicate", replicate is not None),
            ("Sampling", sampling is not None),
            ("NodeAggregate", aggregate is not None),
            ("BSP/SSP", consistency.synchronous),
            ("filters", filters is not None),
            ("backups", bool(backups)),
            ("join", joined),
        )
        if used
    }
    return on


def _message(name: str, r: Refusal, first: str, second: str) -> str:
    fix = "drop one of them" if r.where == "declaration" else ""
    return f"table {name!r}: {LABEL[first]} does not mix with {LABEL[second]}: {r.reason}" + (f"; {fix}" if fix else "")


def check_declaration(name: str, on: set[str]) -> None:
    """Raise Incompatible (a ConfigError) for the first pair of `on` that node.table() refuses."""
    for r in REFUSED:
        if (
            r.where == "declaration"
            and r.by == "node.table"
            and r.a in on
            and r.b in on
            and (r.only != "with backups" or "backups" in on)
        ):
            raise Incompatible(_message(name, r, r.a, r.b))


def call_refusals(name: str, on: set[str]) -> dict[str, str]:
    """{call: TableError message} for the calls (CALLS) a table with `on` refuses."""
    out: dict[str, str] = {}
    for r in REFUSED:
        if r.where == "call" and r.a in on and r.b not in out:
            out[r.b] = f"{r.b} on table {name!r}: not with {LABEL[r.a]}: {r.reason}" + _instead(r.b)
    return out


def _instead(call: str) -> str:
    return {"push_pull": "; use push() then pull() there"}.get(call, "")


def refusals(a: str, b: str) -> list[Refusal]:
    """Every refusal of the pair, either way round."""
    return [r for r in REFUSED if {r.a, r.b} == {a, b}]
