"""The compatibility matrix: for each table kind or option (rows) and each option, call or cluster
event (columns), whether they compose, and which test shows it. Refusals come from client.compat
(the one list node.table() and the request paths use); what works, and what has no effect, is here.

    python -m pskv.client.matrix            writes docs/compatibility.md
    python -m pskv.client.matrix --check    exit 1 if docs/compatibility.md is not current

tests/unit/client/test_compat.py checks that the file is current, that no cell is undecided and
that every test named here exists.
"""

from __future__ import annotations

from .compat import CALLS, EVENTS, KINDS, OPTIONS, REFUSED, Refusal

ROWS = KINDS + OPTIONS + ("intent", "backups", "shared memory")
COLUMNS = OPTIONS + EVENTS
MEANS = {
    "dense": "a dense table in memory (`rows=N`), Async, no option",
    "sparse": "`key_space='uint64', rows=None` (store.sparse)",
    "disk": "`storage='disk', cache_rows=N, path=DIR` (store.disk)",
    "Relocate": "relocation: `table.localize` (every dense table has it) and "
    "`placement=pskv.Relocate(location_caches=True)`",
    "Replicate": "`replicate=pskv.Replicate(...)`: hot-key copies on every node",
    "Sampling": "`sampling=pskv.Sampling(...)`: prepare_sample / pull_sample (preloc and pool localize)",
    "NodeAggregate": "`aggregate=pskv.NodeAggregate()`: the node sums its threads' pushes per round",
    "BSP/SSP": "`consistency=pskv.BSP()` / `pskv.SSP(s)`, with its row cache and push buffer",
    "Cache": "`cache=pskv.Cache(rows=, buffer_rows=)`: sizes a BSP/SSP table's row cache and push buffer",
    "filters": "`node.table(filters=...)`: the table's wire filters (key cache, compression, fp16/bf16)",
    "push_pull": "the call `table.push_pull`",
    "intent": "intent signaling (AdaPM): `table.intent(keys, start, end)` and `worker.advance_clock()`, or "
    "`pskv.data.Lookahead`: keys one node intends move there ahead of use, keys several intend are copied to "
    "them (client.intents, server.intents, client.intent_sync)",
    "backups": "`pskv.init(backups=B)`: chain replication and failover",
    "shared memory": "the nodes of one host serve each other's keys from their shards in shared memory "
    "(store.shm, store.peer; on unless `PSKV_SHARED_MEMORY=0` / `pskv launch --no-shared-memory`); "
    "its tests assert that keys were served through it (TableState.shared_keys), and with it off "
    "that none were",
    "checkpoint": "`node.checkpoint()` of the table",
    "restore": "a restore of its checkpoint onto another node count, with other options",
    "join": "a node joins the running cluster (`pskv.init(join=...)`)",
    "leave": "`node.leave()`",
}
_T = "tests/cluster/"
_PAIRS = _T + "test_compose_pairs.py::test_every_pair_composes_then_restores_onto_other_nodes_and_options"
_BACKED = _T + "test_compose_pairs.py::test_options_compose_with_backups_and_a_node_leaves"
_ELASTIC = _T + "test_compose_pairs.py::test_options_compose_with_a_join_and_a_leave"
_PUSH_PULL = _T + "test_sparse.py::test_push_pull_sparse_and_dense"
_FILTERS = _T + "test_sparse.py::test_a_tables_filters_apply_to_every_push_and_pull_that_gives_none"
_SPARSE_CKPT = _T + "test_sparse.py::test_checkpoint_of_a_sparse_table_restores_on_another_cluster_size"
_SPARSE_SSP = _T + "test_sparse.py::test_sparse_bsp_and_ssp_pulls_hold_every_update_stamped_before_the_bound"
_CLOCKS = _T + "test_elastic.py::test_bsp_and_ssp_clocks_count_the_current_members"
_ROUNDS = _T + "test_aggregation.py::test_round_sums_exact"
_CACHE = _T + "test_consistency.py::test_row_cache_and_push_coalescing"
_LEAVES = _T + "test_elastic.py::test_node_leaves_without_backups_and_nothing_is_lost"
_REPLICAS = _T + "test_replica_compose.py::"
_BACKUPS = "tests/fault/test_backups.py::"
_SHM = _T + "test_shared_memory.py::"
_SHM_FAULT = "tests/stress/test_shm_stress.py::test_shm_failure_slice"
_COMPOSE = "tests/stress/test_compose.py::test_compose_stress"  # make stress: every kind, checkpoints, events
_INTENTS = _T + "test_intents.py::"
_INTENT_ALL = _INTENTS + "test_intents_on_every_option_then_a_checkpoint_restores_onto_three_nodes"

# (row, column) -> the test(s) that show it works; a pair of rows once, either way round
WORKS: dict[tuple[str, str], str | tuple[str, ...]] = {
    ("dense", "Relocate"): _T + "test_placement.py::test_relocation_stress_sums_exactly",
    ("dense", "Replicate"): _T + "test_placement.py::test_replication_visibility_sync_threshold",
    ("dense", "Sampling"): _T + "test_placement.py::test_sampling_schemes_keep_their_promises",
    ("dense", "NodeAggregate"): _ROUNDS,
    ("dense", "BSP/SSP"): _T + "test_consistency.py::test_bsp_equals_the_sequential_schedule",
    ("dense", "Cache"): _CACHE,
    ("dense", "filters"): _FILTERS,
    ("dense", "push_pull"): _PUSH_PULL,
    ("dense", "backups"): _BACKUPS + "test_one_kill_during_push_storm",
    ("dense", "checkpoint"): _T + "test_checkpoint.py::test_checkpoint_is_a_consistent_cut_while_every_node_pushes",
    ("dense", "restore"): _T + "test_checkpoint.py::test_three_nodes_save_two_and_one_restore_bit_for_bit",
    ("dense", "join"): _T + "test_elastic.py::test_a_node_joins_and_another_leaves_during_a_push_storm",
    ("dense", "leave"): _LEAVES,
    ("sparse", "filters"): _FILTERS,
    ("sparse", "push_pull"): _PUSH_PULL,
    ("sparse", "BSP/SSP"): _SPARSE_SSP,
    ("sparse", "Cache"): _SPARSE_SSP,  # (buffer_rows= sizes its push buffer; rows= is inert, NO_EFFECT)
    ("sparse", "backups"): _BACKUPS.replace("test_backups", "test_sparse_backups")
    + "test_a_range_head_dies_during_a_sparse_push_storm",
    ("sparse", "checkpoint"): _SPARSE_CKPT,
    ("sparse", "restore"): _SPARSE_CKPT,
    ("sparse", "join"): _T + "test_sparse_elastic.py::test_a_node_joins_a_sparse_table_then_another_leaves",
    ("sparse", "leave"): (
        _T + "test_sparse_elastic.py::test_a_node_joins_a_sparse_table_then_another_leaves",
        _T + "test_sparse_elastic.py::"
        "test_a_node_leaves_a_sparse_table_during_a_push_storm_and_a_checkpoint_restores_onto_two",
    ),
    **{("disk", b): _PAIRS for b in (*OPTIONS, "push_pull", "restore")},
    ("disk", "checkpoint"): ("tests/unit/store/test_disk.py::test_a_checkpoint_of_a_disk_table_streams_it", _COMPOSE),
    ("disk", "join"): (_ELASTIC, _COMPOSE),
    ("disk", "leave"): (_ELASTIC, _COMPOSE),
    **{("Relocate", b): _PAIRS for b in ("Replicate", "Sampling", "BSP/SSP", "Cache", "filters", "push_pull")},
    ("Relocate", "backups"): _BACKUPS + "test_kill_during_localize",
    ("Relocate", "checkpoint"): _T + "test_checkpoint_compose.py::"
    "test_checkpoints_while_every_node_localizes_hold_every_row_once",
    ("Relocate", "restore"): (_PAIRS, _COMPOSE),
    ("Relocate", "join"): (_ELASTIC, _COMPOSE),
    ("Relocate", "leave"): _LEAVES,
    **{("Replicate", b): _PAIRS for b in ("Sampling", "Cache", "filters")},
    ("Replicate", "BSP/SSP"): "tests/stress/test_stress.py::test_replicated_rows_stay_out_of_the_row_cache",
    ("Replicate", "backups"): _BACKUPS + "test_kill_with_replicated_hot_keys",
    ("Replicate", "checkpoint"): (_PAIRS, _COMPOSE),
    ("Replicate", "restore"): _REPLICAS + "test_restore_with_other_replicated_keys_is_exact",
    ("Replicate", "join"): _REPLICAS + "test_a_joining_node_starts_from_the_current_replicas",
    ("Replicate", "leave"): _REPLICAS + "test_a_node_leaves_with_unsynced_changes_and_a_node_joins_after",
    **{
        ("Sampling", b): _PAIRS
        for b in ("NodeAggregate", "BSP/SSP", "Cache", "filters", "push_pull", "checkpoint", "restore")
    },
    ("Sampling", "backups"): _BACKED,
    ("Sampling", "join"): _ELASTIC,
    ("Sampling", "leave"): _ELASTIC,
    ("NodeAggregate", "BSP/SSP"): _ROUNDS,
    ("NodeAggregate", "backups"): (_ROUNDS, _BACKED),
    ("NodeAggregate", "checkpoint"): _T
    + "test_checkpoint_compose.py::test_aggregated_table_checkpoint_holds_whole_rounds",
    ("NodeAggregate", "restore"): _PAIRS,
    ("NodeAggregate", "leave"): _BACKED,  # with backups (refused without)
    ("BSP/SSP", "Cache"): _CACHE,
    ("BSP/SSP", "backups"): (_BACKED, _COMPOSE),
    ("BSP/SSP", "checkpoint"): (_PAIRS, _COMPOSE),
    ("BSP/SSP", "restore"): (_PAIRS, _COMPOSE),
    ("BSP/SSP", "join"): _CLOCKS,
    ("BSP/SSP", "leave"): _CLOCKS,
    ("Cache", "backups"): _BACKED,
    ("Cache", "checkpoint"): _PAIRS,
    ("Cache", "restore"): _PAIRS,
    ("Cache", "join"): _ELASTIC,
    ("Cache", "leave"): _ELASTIC,
    **{("filters", b): _PAIRS for b in ("push_pull", "checkpoint", "restore")},
    ("filters", "join"): _ELASTIC,
    ("filters", "leave"): _ELASTIC,
    ("backups", "checkpoint"): _T
    + "test_checkpoint_compose.py::test_checkpoint_with_backups_and_readers_holds_every_row",
    ("backups", "restore"): _PAIRS,
    ("backups", "join"): _T + "test_elastic_backups.py::test_a_node_joins_a_cluster_with_backups_during_a_push_storm",
    ("backups", "leave"): _BACKUPS + "test_node_leaves_in_the_middle_of_a_push_storm",
    # shared memory: the nodes of these tests share one host; each asserts what went through it
    ("dense", "shared memory"): (_SHM + "test_pushes_through_shared_memory_sum_exactly", _SHM_FAULT),
    ("Relocate", "shared memory"): (_SHM + "test_keys_moving_while_pushed_in_shared_memory_stay_exact", _PAIRS),
    **{(b, "shared memory"): _PAIRS for b in ("Replicate", "Sampling", "NodeAggregate", "BSP/SSP", "Cache", "filters")},
    ("shared memory", "push_pull"): (_SHM + "test_pushes_through_shared_memory_sum_exactly", _PAIRS),
    ("shared memory", "checkpoint"): _PAIRS,
    ("shared memory", "restore"): _PAIRS,
    ("shared memory", "join"): _ELASTIC,
    ("shared memory", "leave"): _ELASTIC,
    # intents: each test asserts exact sums while intents move keys
    ("dense", "intent"): (
        _INTENTS + "test_keys_move_to_their_only_intending_node_and_shared_keys_stay",
        _INTENTS + "test_intents_keep_sums_exact",
    ),
    ("disk", "intent"): _INTENT_ALL,
    ("intent", "Relocate"): (
        _INTENTS + "test_keys_move_to_their_only_intending_node_and_shared_keys_stay",
        _INTENT_ALL,
    ),
    ("intent", "Replicate"): (_INTENTS + "test_intents_keep_sums_exact", _INTENT_ALL),
    ("intent", "BSP/SSP"): (_INTENTS + "test_intents_keep_sums_exact", _INTENT_ALL),
    **{
        ("intent", b): _INTENT_ALL
        for b in ("Sampling", "Cache", "filters", "push_pull", "shared memory", "checkpoint", "restore")
    },
    ("intent", "backups"): (
        _INTENTS + "test_intents_with_backups_keep_sums_exact",
        _T + "test_intents_copies.py::test_copies_with_backups_push_through_the_chain_exactly_once",
        _T + "test_intents_copies.py::test_copies_pushes_survive_their_owners_death",
    ),
    ("intent", "join"): _INTENTS + "test_intents_while_a_node_joins_and_another_leaves",
    ("intent", "leave"): _INTENTS + "test_intents_while_a_node_joins_and_another_leaves",
}
_NONE = "no row cache or push buffer for Cache to size"
# accepted, but one side does nothing there
NO_EFFECT: dict[tuple[str, str], str] = {
    ("sparse", "Cache"): "a sparse table keeps no row cache (a RowCache is sized by rows): Cache(rows=) is inert; "
    "buffer_rows= sizes a sparse BSP/SSP table's push buffer",
    ("Cache", "NodeAggregate"): f"an aggregated table sends its pushes in rounds: {_NONE}",
    ("Cache", "filters"): f"filters need an asynchronous table, which has {_NONE}",
    ("Cache", "push_pull"): f"push_pull needs an asynchronous table, which has {_NONE}",
    ("sparse", "shared memory"): "a sparse table sends each key to its range's node: its shards are not in "
    "shared memory (only dense in-memory shards are)",
    ("disk", "shared memory"): "a disk table's rows are in its files on disk, not in shared memory: keys of a "
    "co-located node's disk table travel as messages",
    ("NodeAggregate", "shared memory"): "an aggregated table's rounds travel to the keys' managers as messages "
    "(level 2 sums there); shared memory serves its other reads and its sets",
    ("filters", "shared memory"): "keys served through shared memory travel in no message, so a table's filters "
    "(key cache, compression, fp16/bf16) apply only to the keys that do",
    ("sparse", "intent"): "a sparse table keeps each key at its range's node: its intents are taken and ignored",
    ("NodeAggregate", "intent"): "an aggregated table keeps its static placement: its intents are taken and ignored",
    ("backups", "shared memory"): "with backups every write goes to its range's head as a message and a pull reads "
    "only rows held here or asks their head: nothing is served through shared memory "
    "(the shards' files are made, nobody maps them); a node failure is handled as "
    f"without it ({_SHM_FAULT})",
}


def cell(row: str, column: str) -> tuple[list[Refusal], str | tuple[str, ...] | None, str | None]:
    """(refusals, the test that shows it works, why it has no effect) of one cell of the matrix.
    A call refused on a table lands in its option's column (localize: Relocate, prepare_sample: Sampling)."""
    refused = _one_way(row, column) + (_one_way(column, row) if column in ROWS else [])
    works = WORKS.get((row, column)) or (WORKS.get((column, row)) if column in ROWS else None)
    inert = NO_EFFECT.get((row, column)) or (NO_EFFECT.get((column, row)) if column in ROWS else None)
    return refused, works, inert


def _one_way(a: str, b: str) -> list[Refusal]:
    names = {b} | {call for call, col in CALLS.items() if col == b}
    return [r for r in REFUSED if r.a == a and r.b in names]


def undecided() -> list[tuple[str, str]]:
    """Cells of the matrix that say nothing (the unit test wants none)."""
    return [(a, b) for a in ROWS for b in COLUMNS if a != b and cell(a, b) == ([], None, None)]


def render() -> str:
    """docs/compatibility.md, from REFUSED, WORKS and NO_EFFECT."""
    refusals = list(REFUSED)
    tests = sorted({*(t for w in WORKS.values() for t in _tests(w)), *(r.test for r in REFUSED)})
    effects = sorted(set(NO_EFFECT.values()))
    head = [
        "# Compatibility: table kinds, options and cluster events",
        "",
        "Generated by `python -m pskv.client.matrix` from `src/pskv/client/compat.py` (the one list of",
        "refused pairs, which `node.table()` and the request paths use) and `src/pskv/client/matrix.py`",
        "(the tests); do not edit by hand: `tests/unit/client/test_compat.py` fails when it is not current.",
        "",
        "Rows: table kinds and options; columns: options, the `push_pull` call and cluster events.",
        "`yes Tn`: supported, test Tn shows it; `no Rn`: refused (where: at declaration, at a call,",
        "at join, at leave()); `inert Nn`: accepted, but one side has no effect there.",
        "",
    ]
    grid = ["| | " + " | ".join(COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for a in ROWS:
        cells = []
        for b in COLUMNS:
            refused, works, inert = cell(a, b)
            parts = [f"no R{refusals.index(r) + 1} ({_short(r)})" for r in refused]
            if works:
                parts.append(
                    "yes "
                    + " ".join(f"T{tests.index(t) + 1}" for t in _tests(works))
                    + (
                        (" (without backups)" if refused[0].only == "with backups" else " (with backups)")
                        if refused
                        else ""
                    )
                )
            if inert:
                parts.append(f"inert N{effects.index(inert) + 1}")
            cells.append("·" if a == b else "; ".join(parts) or "?")
        grid.append(f"| **{a}** | " + " | ".join(cells) + " |")
    means = ["", "## What the rows and columns mean", ""] + [f"- **{k}**: {v}" for k, v in MEANS.items()]
    listed = ["", "## Refused pairs", ""] + [
        f"{i}. **{r.a}** x **{r.b}**: refused {_where(r)}{', ' + r.only if r.only else ''} ({r.by}): {r.reason}. "
        f"Shown by {r.test}."
        for i, r in enumerate(refusals, 1)
    ]
    shown = ["", "## Tests", ""] + [f"{i}. T{i}: `{t}`" for i, t in enumerate(tests, 1)]
    no_effect = ["", "## No effect", ""] + [f"{i}. N{i}: {e}" for i, e in enumerate(effects, 1)]
    return "\n".join(head + grid + means + listed + shown + no_effect) + "\n"


def _tests(works: str | tuple[str, ...]) -> tuple[str, ...]:
    return (works,) if isinstance(works, str) else works


def tests_named() -> list[str]:
    """Every test the matrix names (file::function, or a file)."""
    return sorted({*(t for w in WORKS.values() for t in _tests(w)), *(r.test for r in REFUSED)})


def _short(r: Refusal) -> str:
    return f"call {r.b}" if r.where == "call" and r.b in CALLS else "call" if r.where == "call" else r.where


def _where(r: Refusal) -> str:
    return {
        "call": f"at the call ({r.b if r.b in CALLS else r.a})",
        "declaration": "at declaration",
        "join": "at join",
        "leave()": "at leave()",
    }[r.where]


def main(argv: list[str] | None = None) -> int:
    """`python -m pskv.client.matrix [--check] [PATH]`: write docs/compatibility.md (or check it is current)."""
    import argparse
    import pathlib

    parser = argparse.ArgumentParser(prog="python -m pskv.client.matrix", description=main.__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs from what would be written")
    parser.add_argument("path", nargs="?", default="docs/compatibility.md")
    args = parser.parse_args(argv)
    path, text = pathlib.Path(args.path), render()
    if args.check:
        current = path.read_text() if path.exists() else ""
        print(f"{path}: {'current' if current == text else 'stale: run python -m pskv.client.matrix'}")
        return 0 if current == text else 1
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
