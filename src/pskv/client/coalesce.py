"""Coalescing: a thread's small `pull_async` calls to one node leave as one PULL (issue 31).

Per request, pskv spends more Python on both sides (check, stages, tracker, encode, send; receive,
dispatch, serve, reply) than raw pyzmq spends per message; a thread that keeps several small pulls
outstanding (prefetching) pays it for each. So `Route` hands such a call here, to the calling
thread's `Hold` for its (table, node), and this rule decides when it leaves:

- at once, as it would have without coalescing, when none of this hold's requests is in flight
  (a lone pull or the first of a burst loses no time; prefetching keeps its overlap);
- else it waits in the hold, and the hold leaves as one PULL, with one tracker entry and one
  reply, when
    - one of the hold's requests in flight completes (or fails): the thread that completes it
      sends the hold (pskv-server, or a thread that receives its own replies);
    - this thread waits on any Future that is not done yet (net.future.holding);
    - any thread waits on one of the held calls' Futures (`Future.kick`);
    - this thread sends any other message to that node (net.endpoint: its order is kept);
    - it holds CAP_CALLS calls or CAP_KEYS keys.
  So a held call waits at most until a request sent before it is answered (or fails, or times out).

What is never held: `pull()` (it waits at once), a `pull_async` with a callback (nobody may ever
wait to send it), pulls with wire filters, with keys of more than one node, of co-located nodes
(shared memory serves them) or larger than CAP_KEYS, and writes. Each call keeps its own Future,
its own result array and its exact rows: the merged reply is written into each call's `out` by
position (a reply for part of the keys, after forwarding, names its positions).

Threads and ownership: a Hold belongs to the thread that made it (thread-local); another thread
may send it (see above), on the owner's outbox (`via`), so the owner's messages to the node keep
their order; `lock` guards `calls`, `n_keys` and `inflight`, and is held while a request of the
hold leaves (so a message the owner sends next cannot overtake it). Every reply goes to the
owner's reply box; whichever thread waits receives it (net.endpoint.pump), else pskv-server's
sweep of the boxes (net.dispatch) within about _SWEEP.
"""

from __future__ import annotations

import threading

import numpy as np

from .. import kernels
from ..errors import ProtocolError
from ..net import future as futures
from ..net.future import Future
from ..net.wire import Kind
from .request import Request

CAP_CALLS = 64  # a hold leaves once it has this many calls ...
CAP_KEYS = 512  # ... or this many keys (4 KiB of int64): a call with more is never held


class _Local(threading.local):
    holds: list | None = None  # every Hold of the calling thread (any node's: tests run several); the
    # endpoint keeps them too (net.endpoint's holds), so a list costs no lifetime, and a wait reads it fast


_local = _Local()


def pull(h, ctx, dest: int, keys: np.ndarray, out: np.ndarray, gpos, fresh: bool) -> Future:
    """A `pull_async` of `keys`, all for node `dest` (remote, not co-located): sent now or held
    (see the module docstring). Returns the call's Future (its result: `out`)."""
    hold = ctx.endpoint.held(h.spec.table_id, dest)
    if hold is None:
        hold = Hold(ctx, h, dest)
        if _local.holds is None:
            _local.holds = []
            futures.holding.flush = _flush_thread
        _local.holds.append(hold)
    return hold.pull(h, keys, out, gpos, fresh)


def _flush_thread() -> None:
    """Send every hold of the calling thread (it is about to block on a Future)."""
    for hold in _local.holds or ():  # (a flush only sends: no hold is added meanwhile)
        if hold.calls:
            hold.flush()


class _Call:
    __slots__ = ("keys", "out", "gpos", "future")

    def __init__(self, keys, out, gpos, future) -> None:
        self.keys, self.out, self.gpos, self.future = keys, out, gpos, future


class Hold:
    """One thread's coalesced pulls of one table to one node: those held, and how many of its
    requests are in flight."""

    __slots__ = (
        "ctx",
        "table",
        "dest",
        "box",
        "port",
        "pump",
        "lock",
        "calls",
        "n_keys",
        "inflight",
        "sent",
        "merged",
        "__weakref__",
    )

    def __init__(self, ctx, table, dest: int) -> None:
        self.ctx = ctx
        self.table = table  # the client.table.Table of the thread's first call (spec, dim, dtype, state)
        self.dest = dest
        self.box = ctx.endpoint.outbox(dest)  # the owner thread's: every send of this hold goes on it
        self.lock = threading.RLock()  # (a failed send resolves, and `_landed` runs, while it is held)
        self.calls: list[_Call] = []  # held, in call order
        self.n_keys = 0
        self.inflight = 0  # this hold's requests sent and not complete
        self.sent = 0  # requests sent, for stats and tests
        self.merged = 0  # calls that left in a request with others
        self.port = ctx.endpoint.reply_box(swept=True)  # the owner's, where every reply goes (0: none, the inbox)
        self.pump = ctx.endpoint.pump if self.port else None  # receives from it (any thread: net.endpoint)
        ctx.endpoint.hold(table.spec.table_id, dest, self)

    def pull(self, h, keys, out, gpos, fresh: bool) -> Future:
        with self.lock:
            if self.inflight == 0 and not self.calls:  # nothing in flight: at once, alone
                return self._send_one(h, keys, out, gpos, fresh)
            fut = Future(h.desc(Kind.PULL), self.ctx.check).pumped_by(self.pump)
            fut.kick = self.flush
            self.calls.append(_Call(keys, out, gpos, fut))
            self.n_keys += len(keys)
            if len(self.calls) >= CAP_CALLS or self.n_keys >= CAP_KEYS:
                self.flush()
        return fut

    def flush(self) -> None:
        """Send what is held as one request (any thread; a no-op when nothing is). The lock is held
        while it leaves: a message of the owner that follows it waits (net.endpoint), so keeps its place."""
        with self.lock:
            if not self.calls:  # (the common kick: what it waits for left already)
                return
            calls, self.calls, self.n_keys = self.calls, [], 0
            if len(calls) == 1:
                c = calls[0]
                fut = self._send_one(self.table, c.keys, c.out, c.gpos, False)
                fut.add_done_callback(lambda f: c.future.resolve(*f.outcome()))
                return
            merged = _Merged(self.table, calls)
            rid, fut = self.ctx.tracker.new_request(
                merged.bounds[-1], on_part=merged.on_part, desc=calls[0].future.desc
            )
            fut.add_done_callback(merged.landed)
            self.merged += len(calls)
            self._send(rid, fut, np.concatenate([c.keys for c in calls]))

    def _send_one(self, h, keys, out, gpos, fresh) -> Future:
        """One call as its own request (its Future the tracker's). Holding the lock."""
        req = Request(h, Kind.PULL, out, fresh)
        req.parts.append((gpos, None))
        req.rid, fut = self.ctx.tracker.new_request(len(keys), on_part=req.on_part, result=out, desc=h.desc(Kind.PULL))
        fut.pumped_by(self.pump)
        self._send(req.rid, fut, keys)
        return fut

    def _send(self, rid: int, fut: Future, keys: np.ndarray) -> None:
        """Holding the lock: request `rid` (its tracker Future `fut`) of `keys` leaves, in flight until `fut`
        resolves."""
        self.inflight += 1
        self.sent += 1
        fut.add_done_callback(self._landed)
        t = self.table
        t.state.remote_keys += len(keys)
        try:
            self.ctx.endpoint.request(
                self.dest, Kind.PULL, t.spec.table_id, rid, dim=t.dim, via=self.box, reply_to=self.port, keys=keys
            )
        except Exception as exc:  # noqa: BLE001 - the calls fail with it (any thread may be sending)
            self.ctx.tracker.on_reply(rid, 0, self.dest, error=exc)

    def _landed(self, _fut: Future) -> None:
        """One of this hold's requests completed or failed: send what was held meanwhile."""
        with self.lock:
            self.inflight -= 1
            go = bool(self.calls)
        if go:
            self.flush()

    def __repr__(self) -> str:
        return f"<Hold table={self.table.name!r} to={self.dest} held={len(self.calls)} inflight={self.inflight}>"


class _Merged:
    """A request that carries several calls' keys back to back: writes each reply part into the
    calls' results, and resolves each call's Future when the request completes."""

    __slots__ = ("table", "calls", "bounds")

    def __init__(self, table, calls: list[_Call]) -> None:
        self.table = table
        self.calls = calls
        bounds = [0]
        for c in calls:
            bounds.append(bounds[-1] + len(c.keys))
        self.bounds = bounds  # call i's keys are [bounds[i], bounds[i + 1]) of the request's

    def on_part(self, sender: int, payload) -> None:
        header, p = payload
        t, n = self.table, header.n_keys
        if p.values is None or p.values.shape != (n, t.dim) or p.values.dtype != t.dtype:
            got = None if p.values is None else f"{p.values.shape} {p.values.dtype}"
            raise ProtocolError(
                f"node {sender} answered a pull on table {t.name!r} with {got}, expected "
                f"({n}, {t.dim}) {t.dtype}; are all nodes running the same pskv?"
            )
        values, bounds = p.values, self.bounds
        if p.positions is None:
            if n != bounds[-1]:
                raise ProtocolError(f"node {sender} answered {n} of {bounds[-1]} keys without positions")
            for i, c in enumerate(self.calls):
                _put(c, values[bounds[i] : bounds[i + 1]], None)
            return
        pos = p.positions
        if len(pos) and (pos.min() < 0 or pos.max() >= bounds[-1]):
            raise ProtocolError(f"node {sender} answered positions outside the request")
        of = np.searchsorted(np.asarray(bounds), pos, side="right") - 1  # (n,) the call of each row
        for i in np.unique(of):
            sel = np.flatnonzero(of == i)
            _put(self.calls[i], values[sel], pos[sel] - bounds[i])

    def landed(self, fut: Future) -> None:
        error = fut.exception()
        for c in self.calls:
            c.future.resolve(None if error is not None else c.out, error)


def _put(call: _Call, rows: np.ndarray, at) -> None:
    """Rows for positions `at` of the call's keys (None: all, in order) into its result."""
    if at is None:
        if call.gpos is None:
            np.copyto(call.out, rows)
        else:
            kernels.put_rows(call.out, call.gpos, rows)
    else:
        kernels.put_rows(call.out, at if call.gpos is None else call.gpos[at], rows)
