"""Coordinator: one per cluster (in `pskv launch`, or in node 0 when none runs); its loop, tick and
a kind-to-handler map. What each message means is the protocol parts', which share one `Members`
record (membership.members: addresses, states, send/broadcast):

    rendezvous   HELLO until all N joined: WELCOME; ABORT after rendezvous_timeout
    joining      HELLO{join}: a node joins the running cluster (JOINED, MEMBERSHIP{joined});
                 with backups its entry into the chains (MEMBERSHIP{entered})
    collectives  TABLE_DECL, BARRIER, CLOCK, BYE: TABLE_OK, BARRIER_RELEASE, GLOBAL_CLOCK; STALLED
    changes      HEARTBEAT and silence, ABORT: NODE_FAILED, or with backups MEMBERSHIP{dead};
                 SYNCED; LEAVE (with backups, or go / ready without), DRAINED: LEFT; SHUTDOWN_OK

    coordinator -- TICK{barriers, tables, clocks, low} (every heartbeat_interval) -> nodes: a silent
                   coordinator is a failure too (membership.client, membership.takeover)

`CoordinatorClient` (membership.client) is each node's side of it. Both speak control messages
(net.wire.control). A coordinator that takes over a running cluster is membership.takeover's.

Threads and ownership: `Coordinator` runs in its own thread, pskv-coord, which owns its
Transport, its `Members` and every protocol part; other threads reach it only through
`_control`, a SimpleQueue (report_failure, close).
"""

from __future__ import annotations

import dataclasses
import errno as errno_codes
import logging
import queue
import threading
import time

from ..config import ConfigError, NodeConfig, split_address
from ..errors import ProtocolError, TransportError
from ..net import auth
from ..net.drops import peer_of
from ..net.transport import Transport
from ..net.wire import Kind, control_payload, frame_bytes, unpack_header
from .changes import Changes
from .collectives import Collectives
from .joining import Joining
from .members import Members
from .rendezvous import Rendezvous

log = logging.getLogger(__name__)


class Coordinator:
    """The cluster's coordinator service. `start()` it, give nodes `address`, `close()` it."""

    def __init__(
        self,
        num_nodes: int,
        host: str = "127.0.0.1",
        port: int = 0,
        config: NodeConfig | None = None,
        *,
        host_rank: int | None = None,
        term: int = 0,
    ) -> None:
        self.config = config or NodeConfig()
        self._transport = Transport(
            host, port=port, linger=2.0, send_timeout=self.config.failure_timeout, keys=auth.keys_for(self.config)
        )
        self._transport.drops.what = "the coordinator"
        self.address = self._transport.address
        self._control: queue.SimpleQueue = queue.SimpleQueue()  # (verb, args) from other threads
        self._thread = threading.Thread(target=self._run, name="pskv-coord", daemon=True)
        # below: pskv-coord only
        self.members = Members(num_nodes, self.config, self._transport, host_rank=host_rank, term=term)
        self.rendezvous = Rendezvous(self.members, time.monotonic())
        self.collectives = Collectives(self.members)
        self.changes = Changes(self.members, self.collectives)
        self.joining = Joining(self.members, self.collectives, self.changes)
        self._handler_map: dict = {}

    @property
    def num_nodes(self) -> int:
        return self.members.num_nodes

    @property
    def host_rank(self) -> int | None:
        return self.members.host_rank

    @property
    def term(self) -> int:
        return self.members.term

    @property
    def cluster(self) -> int:
        return self.members.cluster

    @property
    def failures(self) -> list[tuple[int, str]]:
        """(rank, reason) of every node that failed, and of a stall, for the launcher's report."""
        return self.members.failures

    def start(self) -> Coordinator:
        self.rendezvous.started = time.monotonic()
        self._handler_map = self._handlers()
        self._thread.start()
        return self

    def report_failure(self, rank: int, reason: str) -> None:
        """Tell every node that `rank` failed (e.g. its process exited). Any thread."""
        self._control.put(("fail", (rank, reason)))

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread and close the sockets. Idempotent."""
        if self._thread.is_alive():
            self._control.put(("close", None))
            self._thread.join(timeout)
        elif not self._thread.ident:
            self._transport.close()

    # ---- pskv-coord thread --------------------------------------------------------------------
    def _run(self) -> None:
        interval = self.config.heartbeat_interval
        next_tick = last_turn = time.monotonic()
        try:
            while not self.members.finished:
                if not self._drain_control():
                    break
                frames = self._transport.recv(min(0.05, interval))
                if frames is not None:
                    self._receive(frames)
                now = time.monotonic()
                if now - last_turn > self.config.failure_timeout / 2:
                    # this process did not run for a while (SIGSTOP, a swap storm): the nodes' silence
                    # meanwhile is ours; what they sent (e.g. that a node took the coordinator over) is
                    # still to be read before anyone is failed for silence
                    self.members.heard_all(now)
                last_turn = now
                if now >= next_tick:
                    next_tick = now + interval
                    self._tick(now)
        except Exception:
            log.exception("coordinator crashed")
        finally:
            self._transport.close()

    def _drain_control(self) -> bool:
        while True:
            try:
                verb, args = self._control.get_nowait()
            except queue.Empty:
                return True
            if verb == "close":
                return False
            if verb == "fail":
                self.changes.fail(*args)

    def _receive(self, frames: list) -> None:
        m = self.members
        try:
            header = unpack_header(frame_bytes(frames[0]))
            payload = control_payload(header, frames)
        except ProtocolError as exc:
            m.drops.add(peer_of(frames), str(exc))
            return
        rank = header.sender
        if header.kind == Kind.HELLO:
            self._hello(rank, payload)
            return
        if header.cluster != m.cluster or rank not in m.state:
            m.drops.add(peer_of(frames, rank), f"{header!r}: not from this cluster")
            return
        m.last_seen[rank] = time.monotonic()
        handler = self._handler_map.get(header.kind)
        if m.state[rank] == "failed":  # it stalled and came back: tell it, not only the others
            m.send(rank, Kind.NODE_FAILED, m.failure_payload(rank))
            return
        if handler is not None:
            try:
                handler(rank, payload)
            except (KeyError, TypeError, ValueError) as exc:
                m.drops.add(peer_of(frames, rank), f"{header!r} with a malformed payload: {exc!r}")

    def _handlers(self) -> dict:
        """Kind -> handler(rank, payload), for messages from members (HELLO comes before: `_hello`)."""
        changes, collectives = self.changes, self.collectives
        return {
            Kind.TABLE_DECL: self._declare,
            Kind.BARRIER: collectives.barrier,
            Kind.CLOCK: collectives.clock,
            Kind.BYE: self._bye,
            Kind.HEARTBEAT: changes.heartbeat,
            Kind.SYNCED: changes.synced,
            Kind.LEAVE: changes.leave,
            Kind.DRAINED: changes.drained,
            Kind.ABORT: self._abort,
        }

    def _hello(self, rank: int, p: dict) -> None:
        address = str(p.get("address", ""))
        try:
            split_address(address)
        except ConfigError:
            self.members.drops.add(peer_of([], rank), f"a HELLO with address {address!r}")
            return
        if p.get("join"):
            self._join(address)
        elif self.rendezvous.hello(rank, p, address, time.monotonic()):
            self.changes.formed()
            self.rendezvous.welcome()

    def _join(self, address: str) -> None:
        self.joining.join(address)

    def _declare(self, rank: int, p: dict) -> None:
        self.joining.declared(rank, self.collectives.declare(rank, p))

    def _bye(self, rank: int, p: dict) -> None:
        self.members.state[rank] = "bye"
        if self.collectives.bye(rank):  # (it left a declaration undeclared: the cluster stalls)
            self.changes.finish_if_done()

    def _abort(self, rank: int, p: dict) -> None:
        self.changes.fail(rank, p.get("reason", "aborted"))

    def _tick(self, now: float) -> None:
        m = self.members
        if not m.welcomed:
            if self.rendezvous.expired(now):
                m.finished = True
            return
        self.collectives.overdue(now)
        # nodes that said bye still serve their rows until everyone has: tick them and watch them too
        tick = self.collectives.tick()
        if self.config.backups:
            tick["low"] = {str(r): w for r, w in self.changes.low.items()}
        m.broadcast(Kind.TICK, tick, states=("alive", "bye", "leaving"))
        for rank, silent in m.silent(now, self.config.failure_timeout):
            self.changes.fail(rank, f"missed heartbeats, last seen {silent:.1f} s ago")

    def __repr__(self) -> str:
        return f"<Coordinator {self.address} term={self.term} {self.members!r}>"


def start_coordinator(cfg: NodeConfig) -> tuple[Coordinator | None, NodeConfig]:
    """A node's coordinator, if it runs one: in a private 1-node cluster (the config then gets its
    address), or in node 0 when no launcher runs it (PSKV_EXTERNAL_COORDINATOR unset). Raises
    TransportError saying what to do when node 0 cannot bind the address."""
    if cfg.coordinator is None:
        coord = Coordinator(1, "127.0.0.1", 0, cfg).start()
        return coord, dataclasses.replace(cfg, coordinator=coord.address)
    if cfg.rank != 0 or cfg.external_coordinator:
        return None, cfg  # `pskv launch` (PSKV_EXTERNAL_COORDINATOR=1) runs it
    host, port = split_address(cfg.coordinator)
    try:
        coord = Coordinator(cfg.num_nodes, host, port, cfg, host_rank=0)
    except TransportError as exc:
        raise TransportError(
            f"node 0 cannot start the coordinator at {cfg.coordinator}: {_bind_problem(exc, host, port)}"
        ) from exc
    return coord.start(), cfg


def _bind_problem(exc: TransportError, host: str, port: int) -> str:
    """Why binding the coordinator's port failed, and what to do, in words."""
    errno = getattr(exc.__cause__, "errno", None)
    if errno == errno_codes.EADDRINUSE:
        return (
            f"port {port} is already in use (another pskv cluster or another program holds it); choose a free "
            f"port in PSKV_COORDINATOR, or stop what listens there (`ss -ltnp | grep :{port}`)"
        )
    if errno == errno_codes.EADDRNOTAVAIL:
        return (
            f"{host} is not an address of this machine; node 0 starts the coordinator when no launcher runs "
            "one, so PSKV_COORDINATOR must name node 0's machine (or use `pskv launch`)"
        )
    return str(exc)
