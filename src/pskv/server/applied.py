"""Applied: the at-most-once record of one key range with backups (server.chain).

A write is identified by (origin, request id, part). Each range keeps the ids it applied; they
travel with the range's SNAPSHOT. Ids below an origin's low watermark (its oldest pending request,
from the coordinator's TICK) are complete everywhere: they are forgotten, and the watermark stays
as a floor, so a late copy of such a write (a resend still on its way when the first copy
completed) is a duplicate on every node, whenever each node pruned.

Threads and ownership: pskv-server only.
"""

from __future__ import annotations

import numpy as np


class Applied:
    """The writes (origin, request id, part) applied to one key range, and per origin a floor: every
    request id below it is complete (its origin's low watermark), so a copy of such a write that
    comes late (a resend still on its way when the first copy completed) is known as a duplicate
    on every node, whenever each of them pruned."""

    __slots__ = ("_ids", "_floor")

    def __init__(self) -> None:
        self._ids: dict[int, set[tuple[int, int]]] = {}  # origin -> {(request id, part)}
        self._floor: dict[int, int] = {}  # origin -> its requests below this id are complete

    def __contains__(self, write: tuple[int, int, int]) -> bool:
        if write[1] < self._floor.get(write[0], 0):
            return True
        ids = self._ids.get(write[0])
        return ids is not None and (write[1], write[2]) in ids

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
    def of(cls, rows: np.ndarray) -> "Applied":
        applied = cls()
        for origin, rid, part in rows.tolist():
            applied.add((origin, rid, part))
        return applied

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._ids.values())
