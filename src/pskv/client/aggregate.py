"""Two-level aggregation (mshadow-ps) for tables made with `node.table(..., aggregate=pskv.NodeAggregate())`.

Level 1, on each node: every worker thread of the node pushes key k once per *round* and then
pulls it (mshadow-ps's `Push(data, key, devid)` then `PullReq(data, key, devid)`). The node sums
the threads' pushes of round r of k; when the last of its open workers pushed, the sum leaves
in one AGG_PUSH per owner for all keys that push completed, however many threads pushed (keys
in different rounds carry a round each).

Level 2, at the key's owner (`Owner`), by the table's consistency model:

    BSP (and SSP)   round r of k is applied once every node sent its round-r sum: the nodes'
                    sums are added, then the updater runs once (mshadow-ps's dist server);
                    every node then gets the new rows. SSP(s) gets this stricter rule too
                    (it satisfies the "sees round r - s of every node" bound with s = 0).
    Async           each node's sum is applied when it arrives; that node gets the rows at once.

The owner answers an AGG_PUSH with a PULL_REPLY of the rows after the round was applied, so
about one message goes each way per node, owner and round (under BSP, one per AGG_PUSH that a
completed round answers). A pull of k in round r completes when that
reply is here; it returns the sum (updater `add`) or the updated weights (e.g. pskv.SGD).

Rules (AggregationError otherwise, raised before anything changes): a thread pushes a key at most
once per round, and has at most one outstanding pull of a key. A pull of a key that the thread
did not push in its current round is a plain read of the current value (e.g. the initial weights,
or the main thread's look at the result); it does not end a round. Pushes resolve at once (the
contribution is in the node's sum); completion shows in the pulls. The threads taking part are
the node's open workers (those of `node.run()`, or made by `node.worker()` and not closed; the
same set as `worker.barrier()`); a worker made later joins at the node's current round, a worker
that closes leaves its pushes in the pending rounds. The node's main-thread handle may only read.
`set()` gives initial values (pskv.torch.DataParallel's first weights) until this node's first
push of a round; then TableError.
Aggregated tables keep their static placement (no localize, no replication); each node holds
four (rows, dim) buffers for the table (two rounds of sums and two of results), so aggregate
dense models of moderate size (mshadow-ps's layers), not 100M-row embeddings.

With backups level 2 is the chain instead of `Owner`. Async: a node's sums are a push to the
range's head (client.backed: replicated, at most once, sent again after a membership change)
with flag ROWS, and the chain's tail answers with the rows after it (server.chain). BSP/SSP: the
sums, with their rounds, go to the range's head the same way (kind AGG_PUSH), which collects every
live node's, applies the total as a replicated write and answers once the tail has it
(server.rounds).

Checkpoints hold whole rounds (a round's pushes are applied together, once). Every round this
node completed (all its open threads pushed) before it entered `node.checkpoint()` is in it: its
drain waits for the answers, which under BSP/SSP need the other nodes' sums of the round, so
aggregated pushes do not wait at the write gate (a node whose workers it held could never
complete a round another node sent). Pushes of a round still collecting are not: flushing part
of a round would apply the updater to a partial sum, and a run resumed from the checkpoint
repeats that round whole. From the checkpoint's first barrier to its second `hold()` keeps every
round from being applied, so the files hold those applied before. (With backups the chain
applies the sums, server.rounds: only this node's own hand-overs wait.)

Level 1 lives here (`Aggregator`, client side; its round results and the pulls waiting for them in
client.round_results, `Results`, under the Aggregator's `_lock`); level 2 in pskv.server.aggregate (`Owner`), which
the node hands in: this module does not import the server.

Threads and ownership: `Aggregator` is shared by the node's worker threads (push, pull, leave)
and pskv-server (owner replies, as tracker callbacks). `_send_lock` serialises the hand-over of
completed rounds to level 2, so that rounds of a key leave this node in order; it is taken
before `_lock`, which guards all level-1 arrays and the waiting pulls and is never held while a
Future resolves or a message is sent. `Owner` runs in pskv-server (remote nodes' sums) and in
worker threads holding `_send_lock` (this node's own keys); `Owner._lock` guards its arrays and
is held while replies are enqueued (Transport.send only enqueues), never while calling back into
an Aggregator, so the lock order is always `_send_lock` -> `Owner._lock`, `_send_lock` -> `_lock`.
`_hold_lock` (what waits during a checkpoint) is taken after `_send_lock` and before `Owner._lock`.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

import numpy as np

from ..catalog import TableState
from ..errors import AggregationError, ProtocolError, RequestStalled, TableError
from ..net.future import Future
from ..net.wire import Header, Kind, Payload
from . import backed
from .context import Context
from .round_results import Pull, Results, ThreadRounds
from .table import Table

if TYPE_CHECKING:
    from .worker import Worker

log = logging.getLogger(__name__)


class Aggregator:
    """Level 1 of one aggregated table on one node; made by `node.table(..., aggregate=pskv.NodeAggregate())`.

    `owner` is level 2 for this node's keys (a server.aggregate.Owner): `apply(...)` for this
    node's own sums, `serve(header, payload)` for other nodes' AGG_PUSH."""

    def __init__(self, ctx: Context, state: TableState, owner) -> None:
        self._ctx = ctx
        self._state = state
        self.owner = owner
        spec = self.spec = state.spec
        rows, dim = spec.rows, spec.dim
        self._acc = np.zeros((2, rows, dim), spec.dtype)  # sums of round r in [r % 2], being collected
        self._count = np.zeros((2, rows), np.int64)  # open threads that pushed into _acc[r % 2]
        self._sent = np.zeros(rows, np.int64)  # rounds handed to level 2 = the round being collected
        self._threads: dict[int, ThreadRounds] = {}  # worker.thread -> its rounds
        self._lock = threading.Lock()  # guards all of the above and _results; never held while resolving or sending
        self._results = Results(rows, dim, spec.dtype, self._lock)  # round results, the pulls waiting for them
        self._send_lock = threading.Lock()  # rounds of a key leave in order; taken before _lock
        self._table: Table | None = None  # with backups: a Table for client.backed requests (made at first use)
        self._held: list | None = None  # while a checkpoint writes: level-2 work waiting, in order (hold())
        self._hold_lock = threading.Lock()  # guards _held against pskv-server's serve(); after _send_lock
        self.rounds = 0  # key-rounds completed on this node (stats)
        self.messages = 0  # AGG_PUSH messages sent

    # ---- worker threads ---------------------------------------------------------------------------
    def started(self) -> bool:
        """A thread of this node pushed into a round already (set() is for initial values only)."""
        with self._lock:
            return bool(self._sent.any() or self._count.any())

    def push(self, worker: Worker, keys: np.ndarray, updates: np.ndarray) -> Future:
        """Add `updates` (n, dim) to this node's sums of the worker's current round of `keys`."""
        if worker.thread < 0:
            raise AggregationError(
                f"push to aggregated table {self.spec.name!r} from the main thread's handle; "
                "push from the workers of node.run() or node.worker()"
            )
        self._check_table()
        uk, summed = _distinct(keys, updates)  # (m,) sorted, (m, dim)
        with self._send_lock:
            with self._lock:
                self._results.raise_error()
                th = self._thread(worker)
                twice = uk[th.pushed[uk]]
                if len(twice):
                    raise AggregationError(
                        f"thread {worker.thread} of node {self._ctx.rank} pushed keys {twice[:5].tolist()} of table "
                        f"{self.spec.name!r} twice in one round; pull them before pushing again"
                    )
                rounds = th.round[uk]
                if (rounds < self._sent[uk]).any():  # an internal invariant; never silently mix rounds
                    raise AggregationError(f"table {self.spec.name!r}: thread {worker.thread} is behind its node")
                slot = rounds & 1
                self._acc[slot, uk] += summed
                self._count[slot, uk] += 1
                th.pushed[uk] = True
                done = self._complete(uk)
            self._level2(*done)
        return Future.completed(None, f"push {self.spec.name!r} (aggregated)")

    def pull(self, worker: Worker, keys: np.ndarray, out: np.ndarray) -> Future:
        """Round results of the keys the worker pushed in its round, plain reads of the others."""
        self._check_table()
        uk, inv = np.unique(keys, return_inverse=True)
        fut = Future(f"pull {self.spec.name!r} (aggregated)", self._ctx.check)
        timeout = self._ctx.collective_timeout  # rounds wait for this node's other threads
        fut.stall_after(
            timeout,
            lambda: RequestStalled(
                f"pull of table {self.spec.name!r} (aggregated) by thread {worker.thread} of node {self._ctx.rank}: "
                f"its round did not complete within {timeout:g} s (PSKV_COLLECTIVE_TIMEOUT); every open worker thread "
                "of the node must push (or close) for a round to complete",
                self._ctx.rank,
                request=fut.desc,
            ),
        )
        with self._lock:
            self._results.raise_error()
            th = self._thread(worker) if worker.thread >= 0 else None
            if th is not None and th.pulling[uk].any():
                again = uk[th.pulling[uk]]
                raise AggregationError(
                    f"thread {worker.thread} of node {self._ctx.rank} pulls keys {again[:5].tolist()} of table "
                    f"{self.spec.name!r} while its earlier pull of them is outstanding; wait() for that one first"
                )
            mine = th.pushed[uk] if th is not None else np.zeros(len(uk), bool)  # (m,) round keys
            rk = uk[mine]
            rounds = th.round[rk] if th is not None else rk
            if len(rk):
                assert th is not None  # (without a thread's rounds no key is its round's)
                th.round[rk] += 1
                th.pushed[rk] = False
                th.pulling[rk] = True
            at = mine[inv]  # (n,) rows of out that get a round result
            pos = np.flatnonzero(at)
            index = (np.cumsum(mine) - 1)[inv[pos]]
            reads = np.flatnonzero(~at)
            p = Pull(th, rk, rounds, pos, index, out, fut, 1 + bool(len(reads)))
            finished = self._results.try_finish(p) if len(rk) else self._results.part_done(p)
            if not finished:
                self._results.waiting.append(p)
        if finished:
            self._results.resolve(p)
        if len(reads):
            read = worker.table(self.spec.name).request(Kind.PULL, keys[reads], None, out, copy=True, gpos=reads)
            read.add_done_callback(lambda f: self._results.read_done(p, f.exception()))
        return fut

    def leave(self, worker: Worker) -> None:
        """A worker closed: its pushes stay in the pending rounds, which no longer wait for it."""
        with self._send_lock:
            with self._lock:
                th = self._threads.pop(worker.thread, None)
                if th is not None:  # one fewer thread to wait for, also if it never used this table
                    top = th.round + th.pushed  # (rows,) it contributed to rounds below this
                    for ahead in (0, 1):
                        r = self._sent + ahead
                        mask = r < top
                        self._count[r[mask] & 1, np.flatnonzero(mask)] -= 1
                done = self._complete(np.flatnonzero(self._count.any(axis=0)))
            self._level2(*done)

    # ---- level 1 ----------------------------------------------------------------------------------
    def _thread(self, worker: Worker) -> ThreadRounds:
        th = self._threads.get(worker.thread)
        if th is None:
            th = self._threads[worker.thread] = ThreadRounds(self._sent)
        return th

    def _complete(self, keys: np.ndarray) -> tuple[list, list, list]:
        """Under _lock: take the sums of every round of `keys` that all open threads pushed."""
        members = self._ctx.barrier.size  # the node's open workers (barrier members)
        out_keys, out_rounds, out_sums = [], [], []
        while len(keys) and members:
            r = self._sent[keys]
            slot = r & 1
            full = self._count[slot, keys] >= members
            if not full.any():
                break
            keys, r, slot = keys[full], r[full], slot[full]
            out_keys.append(keys)
            out_rounds.append(r)
            out_sums.append(self._acc[slot, keys])  # (m, dim) a copy (fancy indexing)
            self._acc[slot, keys] = 0
            self._count[slot, keys] = 0
            self._sent[keys] += 1
            self.rounds += len(keys)
        return out_keys, out_rounds, out_sums

    def _level2(self, keys_list: list, rounds_list: list, sums_list: list) -> None:
        """Under _send_lock: send each batch of completed rounds to the owners (or apply it here)."""
        if self._held is not None and keys_list:  # a checkpoint writes: after it (hold())
            self._held.append((keys_list, rounds_list, sums_list))
            return
        for keys, rounds, sums in zip(keys_list, rounds_list, sums_list, strict=True):  # a batch: distinct keys
            if self._ctx.chains() is not None:
                self._send_backed(keys, rounds, np.ascontiguousarray(sums))
                continue
            owners = self._state.ranges.manager_of(keys)
            for o in np.unique(owners):
                sel = owners == o
                self._send_round(int(o), keys[sel], rounds[sel], np.ascontiguousarray(sums[sel]))

    def _send_round(self, owner: int, keys: np.ndarray, rounds: np.ndarray, sums: np.ndarray) -> None:
        if owner == self._ctx.rank:
            for k, r, values in self.owner.apply(owner, 0, keys, rounds, sums):
                self._results.deliver(k, r, values)
            return
        rid, fut = self._ctx.tracker.new_request(
            len(keys),
            desc=f"aggregated push of table {self.spec.name!r}",
            on_part=lambda sender, payload: self._on_reply(keys, rounds, sender, payload),
        )
        fut.add_done_callback(self._results.on_request_done)
        self.messages += 1
        several = (rounds != rounds[0]).any()  # keys in different rounds: one round per key (8 bytes each)
        self._ctx.endpoint.request(
            owner,
            Kind.AGG_PUSH,
            self.spec.table_id,
            rid,
            part=int(rounds[0]),
            keys=keys,
            values=sums,
            rounds=rounds if several else None,
        )

    def _send_backed(self, keys: np.ndarray, rounds: np.ndarray, sums: np.ndarray) -> None:
        """With backups: the node's sums are pushes to their ranges' heads like any other
        (client.backed: chain-replicated, at most once, sent again after a membership change); the
        chain's tail answers with the rows after them (flag ROWS), which complete the rounds."""
        if self._table is None:
            self._table = Table(self._ctx, self._state, None)
        out = np.empty((len(keys), self.spec.dim), self.spec.dtype)  # (n, dim) the rows after the sums
        if self._state.consistency.synchronous:  # BSP/SSP: the head collects every node's sums (server.rounds)
            fut = backed.request(self._table, Kind.AGG_PUSH, keys, sums, out, None, False, rows=True, rounds=rounds)
        else:
            fut = backed.request(self._table, Kind.PUSH, keys, sums, out, None, False, rows=True)
        self.messages += 1
        fut.add_done_callback(
            lambda f: self._results.on_request_done(f) if f.exception() else self._results.deliver(keys, rounds, out)
        )

    # ---- replies (pskv-server); their results go to `_results` (client.round_results) --------------
    def _on_reply(self, keys: np.ndarray, rounds: np.ndarray, sender: int, payload) -> None:
        _header, p = payload
        if p.positions is not None:
            if len(p.positions) and (p.positions.min() < 0 or p.positions.max() >= len(keys)):
                raise ProtocolError(f"node {sender} answered positions outside an aggregated push")
            keys, rounds = keys[p.positions], rounds[p.positions]
        if p.values is None or p.values.shape != (len(keys), self.spec.dim) or p.values.dtype != self.spec.dtype:
            raise ProtocolError(
                f"node {sender} answered an aggregated push of table {self.spec.name!r} with "
                f"{None if p.values is None else p.values.shape}, expected ({len(keys)}, "
                f"{self.spec.dim}) {self.spec.dtype}"
            )
        self._results.deliver(keys, rounds, p.values)

    # ---- owner side, pskv-server ------------------------------------------------------------------
    def serve(self, header: Header, payload: Payload) -> None:
        with self._hold_lock:
            if self._held is not None:  # a checkpoint writes: applied after it (hold())
                self._held.append((header, payload))
                return
            results = self.owner.serve(header, payload)
        # a remote node's sum may complete a BSP round that this node is part of: deliver ours
        for keys, r, values in results:
            self._results.deliver(keys, r, values)

    # ---- checkpoints (the node's checkpointing thread) ---------------------------------------------
    def hold(self) -> None:
        """No round is applied here, nor handed on by this node, until `release()` (other nodes'
        sums and this node's wait in order); returns once none is in progress. See Checkpoints above."""
        with self._send_lock, self._hold_lock:
            if self._held is None:
                self._held = []

    def release(self) -> None:
        """Apply and send what waited since `hold()`, in arrival order; a no-op when nothing holds."""
        results = []
        with self._send_lock, self._hold_lock:
            held, self._held = self._held, None
            for item in held or ():
                try:
                    if len(item) == 2:  # another node's AGG_PUSH
                        results += self.owner.serve(*item)
                    else:  # this node's completed rounds
                        self._level2(*item)
                except Exception as exc:  # noqa: BLE001 - fail the pulls waiting for these rounds, not the checkpoint
                    log.error("table %r: held aggregated sums failed after the checkpoint: %r", self.spec.name, exc)
                    self._results.fail(exc)
        for keys, r, values in results:
            self._results.deliver(keys, r, values)

    def _check_table(self) -> None:
        moved = not self._state.shard.static and self._ctx.chains() is None  # (with backups: ranges taken over)
        if self._state.shard.replicas is not None or moved:
            raise TableError(f"table {self.spec.name!r}: an aggregated table cannot be replicated or localized")

    def __repr__(self) -> str:
        return (
            f"<Aggregator table={self.spec.name!r} threads={len(self._threads)} rounds={self.rounds} "
            f"messages={self.messages} waiting={len(self._results.waiting)}>"
        )


def _distinct(keys: np.ndarray, updates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, their summed rows): one thread's push counts once per key."""
    uk, inv = np.unique(keys, return_inverse=True)
    if len(uk) == len(keys):
        out = np.empty_like(updates)
        out[inv] = updates
        return uk, out
    out = np.zeros((len(uk), updates.shape[1]), updates.dtype)  # (m, dim)
    np.add.at(out, inv, updates)
    return uk, out
