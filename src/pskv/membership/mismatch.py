"""What differs between two nodes' declarations of one table: the TableMismatch message names the
differing fields only ("dim 4 on node 0 but 8 on node 2"), not the two whole specs (each several
hundred characters, where the one difference is hard to find)."""

from __future__ import annotations

_ADVICE = "declare every table the same way and in the same order on every node"


def _flat(spec: dict, prefix: str = "") -> dict[str, object]:
    """{'updater': {'name': 'sgd', 'lr': 0.1}} -> {'updater.name': 'sgd', 'updater.lr': 0.1}."""
    out: dict[str, object] = {}
    for key, value in spec.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(first: dict, other: dict, first_at: str, other_at: str) -> str:
    """The fields of two table specs (TableSpec.config() and the options) that differ, as
    "dim 4 on node 0 but 8 on node 2, updater.lr 0.1 on node 0 but 0.2 on node 2"."""
    a, b = _flat(first), _flat(other)
    missing = "(not set)"
    parts = [
        f"{key} {a.get(key, missing)!r} {first_at} but {b.get(key, missing)!r} {other_at}"
        for key in list(a) + [k for k in b if k not in a]
        if a.get(key, missing) != b.get(key, missing)
    ]
    return ", ".join(parts).replace(f"{missing!r}", missing) or "the specs differ"


def between_nodes(seq: int, got: dict[int, dict]) -> str | None:
    """The error of declaration #seq if the nodes' specs (rank -> spec) differ, else None: the
    lowest rank's spec against the first rank that differs from it, naming the other ranks too."""
    ranks = sorted(got)
    first = got[ranks[0]]
    bad = [r for r in ranks if got[r] != first]
    if not bad:
        return None
    others = f" (node(s) {bad[1:]} differ from node {ranks[0]} too)" if len(bad) > 1 else ""
    return (
        f"table {first.get('name', '?')!r} (declaration #{seq}) differs between nodes: "
        f"{differences(first, got[bad[0]], f'on node {ranks[0]}', f'on node {bad[0]}')}{others}; {_ADVICE}"
    )


def joiner(seq: int, first: dict, rank: int, spec: dict) -> str:
    """The error of a node that joined later and declared #seq unlike the cluster did."""
    return (
        f"table {first.get('name', '?')!r} (declaration #{seq}) differs: "
        f"{differences(first, spec, 'in the cluster', f'on node {rank}')} (node {rank} joined later); {_ADVICE}"
    )
