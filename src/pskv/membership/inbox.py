"""CoordinatorInbox: a node's side of the coordinator, its state and what pskv-server feeds it.

What the coordinator sends comes in through `on_message` (pskv-server), one handler per kind;
`check` sends heartbeats and judges the coordinator's silence (a takeover with backups); what the
node must do about the news goes out through one `Events` object (membership.events), which the
node's composition root makes from its parts. `CoordinatorClient` (membership.client), the calls
that any thread makes and waits in, is this class with those calls added.

Threads and ownership: pskv-server feeds it (`on_message`, `check`). Its state is guarded by
`_cond`, which is never held while sending or while calling the node's events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..config import NodeConfig
from ..errors import CollectiveStalled, Fenced, NodeFailure
from ..net.wire import Header, Kind, control, control_payload
from .events import Events
from .view import View


class CoordinatorInbox:
    """A node's side of the coordinator: its state; `on_message()` and `check()` are fed by pskv-server."""

    def __init__(
        self,
        send: Callable[[list], None],
        view: View,
        config: NodeConfig,
        events: Events | None = None,
        succession=None,
    ) -> None:
        self._send_frames = send
        self.view = view  # written here on WELCOME
        self.rank = view.rank
        self.config = config
        self.events = events or Events()  # what the node does with the news (set before pskv-server starts)
        self.succession = succession  # membership.takeover.Succession: backups and the coordinator in a node
        self._handlers = {
            Kind.WELCOME: self._welcome,
            Kind.TABLE_OK: self._table_ok,
            Kind.BARRIER_RELEASE: self._barrier_release,
            Kind.SHUTDOWN_OK: self._shutdown_ok_in,
            Kind.TICK: self._tick,
            Kind.ABORT: self._aborted,
            Kind.LEFT: self._left,
            Kind.MEMBERSHIP: self._membership,
            Kind.GLOBAL_CLOCK: self._global_clock,
            Kind.STALLED: self._stalled,
            Kind.NODE_FAILED: self._node_failed,
        }
        self._cond = threading.Condition()  # guards everything below; never held while sending
        self.failure: NodeFailure | None = None  # (only _fail sets it)
        self._abort: str | None = None
        self._decl_seq = 0
        self._decl_results: dict[int, tuple[str | None, bool]] = {}  # seq -> (error, whether a ConfigError)
        self._specs: dict[int, dict] = {}  # seq -> what this node declared (told to a coordinator that took over)
        self._answered: set[int] = set()  # seqs whose TABLE_OK came (a new coordinator may send it again)
        self._clock_report = (0, 0)  # the last (clock, seq) reported
        self._bye_sent = False
        self._leave: str | None = None  # node.leave(): None, "asked", "left", or the coordinator's refusal;
        # without backups "asked", "go" (self._plan: range -> manager), "handed", "done"
        self._plan: list[int] | None = None
        self._barrier_gen = 0
        self._released: set[int] = set()
        self._arrivals: dict[str, list[int]] = {}  # barrier generation -> ranks arrived (from TICKs)
        self._declaring: dict[str, list[int]] = {}  # table declaration seq -> ranks that declared it (TICKs)
        self._clocks: dict[str, int] = {}  # rank -> its applied clock, as the coordinator knows it (TICKs)
        self._shutdown_ok = False
        self._joined: dict | None = None  # this node joined a running cluster: its first barrier, the members
        # then, and (with backups) the declarations it makes before it enters the chains (membership.joining)
        self._entered = 0  # with backups, a joiner: the epoch it entered the chains in (0: not yet)
        self._synced = 0  # the last epoch in which every copy this node holds was filled (SYNCED sent)
        self._failing = False
        self._last_heard = time.monotonic()
        self._last_beat = 0.0
        self._last_check = time.monotonic()

    def _send(self, kind: Kind, payload: dict | None = None) -> None:
        self._send_frames(control(kind, self.view.cluster, self.rank, payload))

    # ---- pskv-server thread ---------------------------------------------------------------------
    def on_message(self, header: Header, frames: list) -> None:
        """A message from the coordinator (the dispatcher admitted it: this cluster's, or WELCOME),
        or a peer's MOVED."""
        if header.kind == Kind.MOVED:
            self._moved(control_payload(header, frames))
        else:
            self.handle(header, control_payload(header, frames))

    def handle(self, header: Header, payload: dict) -> None:
        """The coordinator's message `header` with its `payload`: any message says it is alive."""
        with self._cond:
            self._last_heard = time.monotonic()
        handler = self._handlers.get(header.kind)
        if handler is not None:
            handler(header, payload)

    def _welcome(self, header: Header, p: dict) -> None:
        host = p.get("host")
        with self._cond:
            self.view.welcome(
                header.cluster, {int(r): a for r, a in p["addresses"].items()}, None if host is None else int(host)
            )
            self._cond.notify_all()
        self.events.welcomed()

    def _table_ok(self, header: Header, p: dict) -> None:
        seq = int(p["seq"])
        with self._cond:
            if seq not in self._answered:  # (a coordinator that took over may answer again)
                self._decl_results[seq] = (p.get("error"), bool(p.get("config")))
                self._cond.notify_all()

    def _barrier_release(self, header: Header, p: dict) -> None:
        with self._cond:
            self._released.add(int(p["gen"]))
            self._cond.notify_all()

    def _shutdown_ok_in(self, header: Header, p: dict) -> None:
        with self._cond:
            self._shutdown_ok = True
            self._cond.notify_all()

    def _tick(self, header: Header, p: dict) -> None:
        with self._cond:
            self._arrivals = p.get("barriers", {})
            self._declaring = p.get("tables", {})
            self._clocks = p.get("clocks", {})
        if "low" in p:
            self.events.low_watermarks({int(r): int(w) for r, w in p["low"].items()})

    def _aborted(self, header: Header, p: dict) -> None:
        with self._cond:
            self._abort = str(p.get("reason", "unknown reason"))
            self._cond.notify_all()

    def _left(self, header: Header, p: dict) -> None:
        """LEFT: the coordinator's answer to this node's leave (go, an error, or done)."""
        with self._cond:
            if self._leave == "asked" and "go" in p:
                self._leave, self._plan = "go", [int(m) for m in p["go"]]
            elif self._leave == "asked":
                self._leave = str(p.get("error", "refused"))
            elif p.get("done") and self._leave in ("handed", "left"):
                self._leave = "done"
            self._cond.notify_all()

    def _global_clock(self, header: Header, p: dict) -> None:
        self.events.global_clock(int(p["clock"]))

    def _membership(self, header: Header, p: dict) -> None:
        """A new membership epoch: this node left (as it asked), was taken out (Fenced), or goes on."""
        with self._cond:
            if p.get("left") and int(p["dead"]) == self.rank and self._leave == "asked":
                self._leave = "left"
            if p.get("entered") == self.rank:
                self._entered = int(p["epoch"])
            self._cond.notify_all()
            if self._leave in ("left", "done"):
                return  # we left: the others went on without us, as we asked
        if self.rank not in [int(r) for r in p["alive"]] and self.rank not in p.get("leaving", ()):
            self._fail(
                Fenced(
                    f"node {self.rank} was taken out of the cluster in membership epoch {p['epoch']} "
                    f"({p.get('reason')}); the others went on without it, so it must not serve or change "
                    "anything any more",
                    self.rank,
                )
            )
        elif self.failure is None:
            unfinished = self._unfinished()
            self.events.membership({**p, "unfinished": unfinished} if unfinished else p)

    def _stalled(self, header: Header, p: dict) -> None:
        missing = [int(r) for r in p.get("missing", [])]
        self._fail(CollectiveStalled(f"node {self.rank}: {p.get('reason')}", missing))

    def _node_failed(self, header: Header, p: dict) -> None:
        rank = int(p["rank"])
        if rank == self.rank:
            self._fail(
                Fenced(
                    f"node {self.rank} was declared failed ({p.get('reason')}) and is out of the "
                    "cluster; it must not serve or change anything any more",
                    self.rank,
                )
            )
        else:
            self._fail(
                NodeFailure(
                    f"node {rank} ({p.get('address', '?')}) failed: {p.get('reason')}; this cluster "
                    "cannot continue without it",
                    rank,
                    str(p.get("address", "")),
                )
            )

    def check(self, now: float) -> None:
        """Send a heartbeat when due; declare the coordinator dead after failure_timeout of silence."""
        if not self.view.welcomed or self.failure is not None or self._shutdown_ok or self._leave in ("left", "done"):
            return
        if now - self._last_check > self.config.failure_timeout / 2:
            # this process itself did not run (SIGSTOP, a swap storm): the silence is ours, not the
            # coordinator's; what it sent meanwhile (e.g. that we were taken out) is still to be read
            self._last_heard = now
        self._last_check = now
        if now - self._last_beat >= self.config.heartbeat_interval:
            self._last_beat = now
            low = self.events.low_watermark()
            self._send(Kind.HEARTBEAT, None if low is None else {"low": low})
        silent = now - self._last_heard
        if silent <= self.config.failure_timeout:
            return
        if self.succession is not None and self.succession.possible():
            step = self.succession.after_silence(silent)
            if isinstance(step, dict):  # this node took the coordinator over: it runs it from now on
                self._moved(step)
            elif step is not None:
                self._fail(step)
            return
        self._fail(
            NodeFailure(
                f"the coordinator ({self.config.coordinator or 'in-process'}) has been silent for {silent:.1f} s; "
                "node 0 or the launcher probably died",
                -1,
                self.config.coordinator or "",
            )
        )

    def _unfinished(self) -> list[str]:
        """The tables this node declared whose TABLE_OK has not come (pskv-server reads it in order with
        MEMBERSHIP): built for the members before the change, and no write reached them anywhere, so a
        change must not wait for copies of them, nor leave a range of them unowned (issue 30 F10d)."""
        with self._cond:
            done = self._answered | set(self._decl_results)
            return sorted(str(spec.get("name")) for seq, spec in self._specs.items() if seq not in done)

    def _moved(self, p: dict) -> None:
        """pskv-server: node p["host"] runs the coordinator now (it took over after the old one went
        silent): send there from now on, and tell it what this node knows and waits for."""
        term = int(p["term"])
        if term <= self.view.coordinator_term or self.failure is not None:
            return  # old news
        self.succession.redirect(str(p["address"]), term, int(p["host"]))
        with self._cond:  # after the redirect: what went to the old address before is in here
            self._last_heard = time.monotonic()
            pending_barriers = sorted(set(range(self._barrier_gen)) - self._released)
            state = {
                "epoch": self.view.epoch,
                "alive": sorted(self.view.alive),
                "decls": {str(seq): spec for seq, spec in self._specs.items()},
                "barriers": pending_barriers,
                "released": max(self._released, default=-1),
                "clock": list(self._clock_report),
                "bye": self._bye_sent,
                "outside": sorted(self.view.outside),
            }
            if self._joined is not None:
                state["joined"] = dict(self._joined)
        self._send(Kind.REJOIN, {**state, **self.events.rejoin_state()})
        self.succession.release_held()

    def _fail(self, exc: NodeFailure) -> None:
        with self._cond:
            if self.failure is not None or self._failing:
                return
            self._failing = True
        self.events.failed(exc)  # first: a waiter that wakes up below finds the node failed already
        with self._cond:
            self.failure = exc
            self._cond.notify_all()

    def describe(self) -> list[str]:
        """The collectives this node waits in, for debug dumps."""
        with self._cond:
            barriers = sorted(set(range(self._barrier_gen)) - self._released)
            heard = time.monotonic() - self._last_heard
            return [
                f"coordinator {self.config.coordinator or 'in-process'}: heard {heard:.1f} s "
                f"ago; {self._decl_seq} table declaration(s), {self._barrier_gen} barrier(s) sent; "
                f"barrier generations not released: {barriers[-5:]}; arrivals seen: {self._arrivals}; "
                f"failure: {self.failure}" + self._describe_entry()
            ]

    def _describe_entry(self) -> str:
        """A joiner with backups: how far it is on its way into the chains (membership.joining). Under _cond."""
        if self._joined is None or not self.view.backups:
            return ""
        return (
            f"; joined: declared {self._decl_seq} of the {self._joined['tables']} table(s) before it came, "
            f"entered the chains in epoch {self._entered or '-'}, copies filled in epoch {self._synced or '-'}"
        )
