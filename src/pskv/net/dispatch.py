"""Dispatcher: the pskv-server thread's receive loop, with one handler per message kind.

Each package registers the kinds it owns (`register`): the server its requests and relocation
messages, the endpoint the replies, the coordinator client the control messages. Before a
message reaches its handler, `admit(header)` (handed in by the node, from its membership view)
says whether it comes from this cluster (`ACCEPT`), must wait until this node is welcomed
(`HOLD`: a peer was welcomed before us), or is garbage (`DROP`). `every` adds a duty that runs
on each turn of the loop (heartbeats, request expiry); the loop turns at least every 50 ms, and
after at most _BURST messages that were waiting (they are taken without a poll each). At most
every _SWEEP seconds a turn also takes in the replies waiting in reply boxes whose threads are
not receiving (`Transport.sweep`): replies to a thread's pull_async wait there until it waits.

A burst is taken whole, then dispatched in arrival order. A handler registered as a `Batched`
gets each run of consecutive messages of its kinds in one call (`many`, a list of (header,
frames)), so it can do the per-message work of a run in a few steps (server.serve: one shard
operation for a run of plain pulls, issue 31); a run keeps its order.

What is dropped (garbage, another cluster's messages, a handler's exception) is counted in
`dropped` and in the transport's `drops`, which logs at most one line per peer per minute. If the
transport finds that the coordinator refused this node's handshakes (another secret, net.auth),
`on_refused` gets the ClusterError (the node records it as its failure, so `init()` raises it).
Held messages are bounded (_MAX_HELD): one more is dropped, counted, and the node fails with a
NodeFailure through `on_refused` too. Nothing can bound them without losing one: the message that
releases them (WELCOME, MEMBERSHIP, MOVED) comes through this same inbox, so it cannot stop reading;
and a request, reply or chain write that vanished would break exactly-once sums without a word.

Threads and ownership: everything here runs in pskv-server, except `register`/`every`, which the
node calls before the thread starts. A handler must not block; an exception in one is counted,
logged (rate-limited) and never kills the thread.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable

from ..errors import ClusterError, NodeFailure, ProtocolError
from .drops import Drops, peer_of
from .transport import Transport
from .wire import REPLIES, Header, Kind, frame_bytes, unpack_header

log = logging.getLogger(__name__)
_MAX_HELD = 100_000  # messages held ahead of our view; more means its change never came: the node fails
_BURST = 64  # messages dispatched per turn of the loop at most, so the duties still run while busy
_SWEEP = 0.01  # seconds between sweeps of the reply boxes (Transport.sweep) at most


class Verdict(enum.Enum):
    ACCEPT = 1
    HOLD = 2
    DROP = 3
    FENCED = 4  # from a node that is no member any more (it died or was fenced off): dropped, counted, not logged


class Batched:
    """A handler with a second entry for runs: `one(header, frames)` for a message, `many(items)` for a
    run of consecutive messages of its kinds, items a list of (header, frames) in arrival order."""

    __slots__ = ("one", "many")

    def __init__(self, one: Callable[[Header, list], None], many: Callable[[list], None]) -> None:
        self.one = one
        self.many = many

    def __call__(self, header: Header, frames: list) -> None:
        self.one(header, frames)


class Dispatcher:
    def __init__(
        self,
        transport: Transport,
        rank: int,
        admit: Callable[[Header], Verdict],
        *,
        on_refused: Callable[[ClusterError], object] | None = None,
    ) -> None:
        self._transport = transport
        self.rank = rank
        self._admit = admit
        self._on_refused = on_refused  # records what stops the node: refused handshakes (net.auth), too many held
        self._drops = getattr(transport, "drops", None) or Drops(log, "")  # (a stand-in transport has none)
        self._drops.what = f"node {rank}"
        self._handlers: dict[Kind, Callable[[Header, list], None]] = {}
        self._many: dict[Kind, Callable[[list], None]] = {}  # kinds whose handler takes runs (Batched)
        self._duties: list[Callable[[float], None]] = []
        self._burst_end: list[Callable[[], None]] = []  # fn() before each flush (e.g. batched CHAINs and ACKs)
        self._soon: queue.SimpleQueue = queue.SimpleQueue()  # fn() from other threads, to run in pskv-server
        self._held: list[list] = []  # frames of messages that came ahead of our view (before WELCOME, newer epoch)
        self.overflowed = 0  # messages dropped because _MAX_HELD were held already (the node failed at the first)
        self.dropped = 0  # messages dropped as garbage or from another cluster
        self.fenced = 0  # messages dropped because their sender is no member any more
        self._sweep_at = 0.0  # monotonic time of the next sweep of the reply boxes

    def register(self, kinds: Iterable[Kind], handler: Callable[[Header, list], None]) -> None:
        for kind in kinds:
            if kind in self._handlers:
                raise ProtocolError(f"two handlers for {kind.name}")
            self._handlers[kind] = handler
            if isinstance(handler, Batched):
                self._many[kind] = handler.many

    def every(self, duty: Callable[[float], None]) -> None:
        self._duties.append(duty)

    def at_burst_end(self, fn: Callable[[], None]) -> None:
        """Call fn() at the end of every burst, before what was held back leaves (server.batches)."""
        self._burst_end.append(fn)

    def soon(self, fn: Callable[[], None]) -> None:
        """Run fn() in pskv-server at its next turn (any thread): for work on state only it writes."""
        self._soon.put(fn)

    def _flush(self) -> None:
        for fn in self._burst_end:
            fn()
        self._transport.flush()

    def run(self, stop: threading.Event) -> None:
        """The loop of pskv-server, until `stop` is set. What the handlers send during one burst
        is held back and leaves at its end, packed into one frame per destination (net.outbox)."""
        self._transport.hold_all()
        while not stop.is_set():
            try:
                frames = self._receive()
                burst = []
                while frames is not None:  # what else waits: one poll per burst, not per message
                    burst.append(frames)
                    frames = self._transport.recv_nowait() if len(burst) < _BURST else None
                if burst:
                    self.dispatch_burst(burst)
                self._flush()
                while not self._soon.empty():
                    self._soon.get_nowait()()
                now = time.monotonic()
                for duty in self._duties:
                    duty(now)
                if now >= self._sweep_at:
                    self._sweep(now)
                self._flush()
            except Exception as exc:  # noqa: BLE001 - garbage must never kill the server thread
                self._error(exc, None)

    def _sweep(self, now: float) -> None:
        """Replies waiting in threads' reply boxes while those threads do not wait (a pull_async
        sent to its thread's box, client.coalesce): delivered here, so they complete (callbacks,
        other threads' waits) and none expires unread."""
        self._sweep_at = now + _SWEEP
        sweep = getattr(self._transport, "sweep", None)  # (a stand-in transport has none)
        if sweep is not None:
            sweep(self._dispatch_safely)

    def _dispatch_safely(self, frames: list) -> None:
        """A message swept from a reply box: replies only, as a box's own thread takes (net.endpoint)."""
        try:
            header = self._admitted(frames)
            if header is None:
                return
            if header.kind not in REPLIES:
                self._drop(peer_of(frames, header.sender), f"{header!r}: not a reply, in a reply box")
                return
            self._handlers[header.kind](header, frames)
        except Exception as exc:  # noqa: BLE001 - garbage must never kill the server thread
            self._error(exc, frames)

    def _receive(self) -> list | None:
        try:
            return self._transport.recv(0.05)
        except ClusterError as exc:  # the coordinator refused our handshakes (net.auth): the node cannot go on
            if self._on_refused is None:
                log.error("node %d: %s", self.rank, exc)
            else:
                self._on_refused(exc)
            return None

    def _error(self, exc: Exception, frames: list | None) -> None:
        self.dropped += 1
        sender = None
        if frames:
            try:
                sender = unpack_header(frame_bytes(frames[0])).sender
            except Exception:  # noqa: BLE001 - garbage: its peer is all we can tell
                pass
        self._drops.add(peer_of(frames or [], sender), f"error while dispatching it: {exc!r}", exc_info=exc)

    def dispatch(self, frames: list) -> None:
        header = self._admitted(frames)
        if header is not None:
            self._handlers[header.kind](header, frames)

    def dispatch_burst(self, burst: list[list]) -> None:
        """Dispatch messages in arrival order; runs of consecutive messages for one `Batched` handler
        go to its `many` in one call. An exception is counted against the message (or run) it came from."""
        run: list = []
        many = None
        for frames in burst:
            try:
                header = self._admitted(frames)
                if header is None:
                    continue
                take = self._many.get(header.kind)
                if run and take is not many:
                    self._run(many, run)
                    run = []
                if take is not None:
                    many = take
                    run.append((header, frames))
                else:
                    self._handlers[header.kind](header, frames)
            except Exception as exc:  # noqa: BLE001 - garbage must never kill the server thread
                self._error(exc, frames)
        if run:
            self._run(many, run)

    def _run(self, many: Callable[[list], None] | None, run: list) -> None:
        try:
            if len(run) > 1 and many is not None:  # (a run of several: its handler's `many`)
                many(run)
            else:
                self._handlers[run[0][0].kind](*run[0])
        except Exception as exc:  # noqa: BLE001 - garbage must never kill the server thread
            self._error(exc, run[0][1])

    def _admitted(self, frames: list) -> Header | None:
        """The message's header if it goes to its handler now; else None (held, dropped or fenced)."""
        try:
            header = unpack_header(frame_bytes(frames[0]))
        except ProtocolError as exc:
            self._drop(peer_of(frames), str(exc))
            return None
        verdict = self._admit(header)
        if verdict is Verdict.HOLD:
            if len(self._held) < _MAX_HELD:
                self._held.append(frames)
            else:
                self._overflow(header, frames)
            return None
        handler = self._handlers.get(header.kind)
        if verdict is Verdict.FENCED:
            self.fenced += 1
            return None
        if verdict is not Verdict.ACCEPT or handler is None:
            self._drop(
                peer_of(frames, header.sender),
                f"{header!r}: not from this cluster" if handler else f"{header!r}: no handler for its kind",
            )
            return None
        return header

    def release_held(self) -> None:
        """pskv-server, once welcomed: dispatch the messages held until now, in arrival order."""
        held, self._held = self._held, []
        for frames in held:
            self.dispatch(frames)

    def held(self) -> int:
        return len(self._held)

    def _overflow(self, header: Header, frames: list) -> None:
        """One more message to hold than _MAX_HELD: drop it (counted, logged at most once a minute)
        and fail the node at the first, saying what was held and why."""
        self.overflowed += 1
        self._drop(peer_of(frames, header.sender), f"{header!r}: {_MAX_HELD} messages are held already")
        if self.overflowed > 1:
            return
        error = NodeFailure(
            f"node {self.rank} held {_MAX_HELD} messages that came ahead of its membership view (sent before its "
            "WELCOME or in a newer epoch), waiting for the WELCOME, MEMBERSHIP or MOVED that would admit them, "
            f"which never came; it dropped the next one ({header!r} from {peer_of(frames, header.sender)}, epoch "
            f"{header.epoch}) and stops, since a lost request, reply or write would go unnoticed: look for a "
            f"coordinator message that did not reach node {self.rank} in the logs",
            self.rank,
        )
        if self._on_refused is None:
            log.error("%s", error)
        else:
            self._on_refused(error)

    def _drop(self, peer: str, why: str) -> None:
        self.dropped += 1
        self._drops.add(peer, why)
