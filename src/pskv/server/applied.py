"""Applied: the at-most-once record of one key range with backups (server.chain).

A write is identified by (origin, request id, part). Each range keeps the ids it applied; they
travel with the range's SNAPSHOT. Ids below an origin's low watermark (its oldest pending request,
from the coordinator's TICK) are no longer awaited by their origin: they are forgotten, and the
watermark stays as a floor.

A floor passes failed requests too (request_timeout, an ERROR, `fail_all` take them out of the
pending map), whose writes may still be on their way down a chain. So the floor alone decides only
where a write enters its range, at the head (`fresh(write)`): a write below it (a late resend, or
a failed request's) is not applied there, and so on no copy. Down the chain a copy follows its
link's verdict (`fresh(write, link=True, again=...)`; the head passes a write it did not apply
with flag AGAIN): it applies what the head applied unless it has that very id, even below the
floor (a TICK may overtake the head's CHAIN: the write is applied once on every copy all the
same), and never what the head skipped. A write from a node that is no longer its link (a reader
copy's late write from an earlier tail, after the new tail's fresh copy) is decided by id and
floor as at the head: that fresh copy holds every write the earlier tail passed on.

Threads and ownership: pskv-server only.
"""

from __future__ import annotations

import numpy as np


class Applied:
    """The writes (origin, request id, part) applied to one key range, and per origin a floor: no
    request id below it is awaited by its origin any more (its low watermark)."""

    __slots__ = ("_ids", "_floor")

    def __init__(self) -> None:
        self._ids: dict[int, set[tuple[int, int]]] = {}  # origin -> {(request id, part)}
        self._floor: dict[int, int] = {}  # origin -> it awaits none of its requests below this id

    def __contains__(self, write: tuple[int, int, int]) -> bool:
        """Applied here, or below its origin's floor."""
        return write[1] < self._floor.get(write[0], 0) or self.seen(write)

    def seen(self, write: tuple[int, int, int]) -> bool:
        """This very write is recorded as applied here (whatever the floor)."""
        ids = self._ids.get(write[0])
        return ids is not None and (write[1], write[2]) in ids

    def fresh(self, write: tuple[int, int, int], *, link: bool = False, again: bool = False) -> bool:
        """Whether to apply `write` to this copy (see the module docstring). `link`: it comes from the
        node that passes this copy its range's writes now (our predecessor in the chain, or the tail
        for a reader copy); `again`: that node did not apply it (flag AGAIN)."""
        if again:
            return False
        return not self.seen(write) if link else write not in self

    def add(self, write: tuple[int, int, int]) -> None:
        if write[2] < 0:  # a floor, as array() writes it
            self.prune({write[0]: write[1]})
            return
        self._ids.setdefault(write[0], set()).add((write[1], write[2]))

    def prune(self, low: dict[int, int]) -> None:
        """Raise the origins' floors to their low watermarks and forget the writes below them."""
        for origin, mark in low.items():
            if mark <= self._floor.get(origin, 0):
                continue
            self._floor[origin] = mark
            ids = self._ids.get(origin)
            if ids:
                self._ids[origin] = {w for w in ids if w[0] >= mark}

    def array(self) -> np.ndarray:
        """(m, 3) int64 (origin, request id, part), for a SNAPSHOT; a floor is (origin, floor, -1)."""
        rows = [(o, rid, part) for o, ids in self._ids.items() for rid, part in ids]
        rows += [(o, floor, -1) for o, floor in self._floor.items()]
        return np.array(rows, np.int64).reshape(-1, 3)

    @classmethod
    def of(cls, rows: np.ndarray) -> Applied:
        applied = cls()
        for origin, rid, part in rows.tolist():
            applied.add((origin, rid, part))
        return applied

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._ids.values())
