"""Request: one pull/push/set of a worker in flight, and how each reply part lands in the caller's result.

Threads and ownership: made by the calling thread (`Table._request`), then `on_part` runs in
pskv-server as replies arrive (or in the caller for parts served locally); the tracker completes
the request once every key was answered. A large default pull may adopt the received frame as
its result (`Received`) instead of copying it into fresh memory.
"""

from __future__ import annotations

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from ..net.wire import Kind

ADOPT_MIN = 64 << 10  # bytes: a reply at least this large may become a default pull's result (see on_part)


class Received:
    """A writeable array over a received reply frame's values, which it keeps alive.

    The frame's memory belongs to this one message (libzmq allocated it for the reply when it
    arrived; nothing else reads or reuses it), so the caller may own it as an ordinary array:
    `np.asarray(Received(values))` has this object as its base, which holds `values`, whose
    base holds the frame; the memory is freed with the last reference to the array."""

    __slots__ = ("values", "__array_interface__")

    def __init__(self, values: np.ndarray) -> None:
        self.values = values  # the read-only np.frombuffer view of the frame
        iface = dict(values.__array_interface__)
        iface["data"] = (iface["data"][0], False)  # writeable: see above
        self.__array_interface__ = iface


class Request:
    """One pull/push/set in flight: its parts, and how a reply lands in the caller's `out`."""

    __slots__ = ("table", "kind", "out", "rid", "parts", "fresh", "reply_to")

    def __init__(self, table, kind: Kind, out, fresh: bool = False) -> None:
        self.table = table  # the client.table.Table that sent it (its state, dim, dtype, name)
        self.kind = kind
        self.out = out  # (n, dim) the caller's result for pulls
        self.rid = 0
        self.parts: list[tuple] = []  # part -> (positions in out: an array, a slice, or None: all in order;
        # keys or None)
        self.fresh = fresh  # out was allocated for this pull: nobody else holds it
        self.reply_to = 0  # the caller's reply box (it waits for the replies itself); 0: the inbox

    def on_part(self, sender: int, payload) -> np.ndarray | None:
        """pskv-server (or the caller, for replies to its reply box): write a reply into `out`, and
        learn where its keys live.

        A default pull (no `out=`) that one reply answers whole and in order, with at least
        ADOPT_MIN bytes of rows, gets the received frame itself as its result (returned here;
        the tracker makes it the Future's result) instead of a copy into freshly allocated
        `out`: that copy costs first-touch page faults on every page and made a default pull of
        100,000 x 64 rows up to 4x slower than one with `out=`. The result is then a writeable
        array that owns the reply's memory (Received); `out` stays untouched and is dropped.
        With `out=` the rows are always copied into `out`, which is the result."""
        if payload is None:  # served locally, nothing to write
            return None
        header, p = payload
        if header.part >= len(self.parts):
            raise ProtocolError(f"node {sender} answered part {header.part} of a request with {len(self.parts)} parts")
        gpos, keys = self.parts[header.part]
        out = self.out
        if type(gpos) is slice:  # (a contiguous run of `out`: client.slices)
            out, gpos = out[gpos], None
        if p.positions is not None:
            gpos = p.positions if gpos is None else gpos[p.positions]
            if keys is not None:
                keys = keys[p.positions]
        if keys is not None:
            self.table.state.loc_cache[keys] = sender
        if out is None:  # a push or set (a push_pull has `out`: its reply is PULL_REPLY)
            return None
        t = self.table
        n = header.n_keys
        if p.values is None or p.values.shape != (n, t.dim) or p.values.dtype != t.dtype:
            got = None if p.values is None else f"{p.values.shape} {p.values.dtype}"
            raise ProtocolError(
                f"node {sender} answered a pull on table {t.name!r} with {got}, expected "
                f"({n}, {t.dim}) {t.dtype}; are all nodes running the same pskv?"
            )
        if gpos is None:
            if n != len(out):
                raise ProtocolError(f"node {sender} answered {n} of {len(out)} keys without positions")
            if self.fresh and out is self.out and p.values.nbytes >= ADOPT_MIN and p.values.flags.c_contiguous:
                return np.asarray(Received(p.values))  # (n, dim): the reply is the whole result
            np.copyto(out, p.values)
        else:
            if len(gpos) and (gpos.min() < 0 or gpos.max() >= len(out)):
                raise ProtocolError(f"node {sender} answered positions outside the request")
            kernels.put_rows(out, gpos, p.values)
        return None
