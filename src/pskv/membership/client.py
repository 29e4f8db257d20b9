"""CoordinatorClient: a node's side of the coordinator protocol (join, declare, barrier, clocks, heartbeats).

The calls live here: any thread calls `join`, `declare`, `barrier`, `bye`, `leave` and waits in
them. What the coordinator sends comes in through `on_message` (pskv-server), one handler per
kind, in the base class `CoordinatorInbox` (membership.inbox), which holds the state; what the
node must do about it goes out through one `Events` object (membership.events), which the node's
composition root makes from its parts. The state is guarded by `_cond`, which is never held while
sending or while calling the node's events.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

from ..errors import BarrierTimeout, ClusterError, ConfigError, CoordinatorUnreachable, NodeFailure, TableMismatch
from ..net.wire import FROM_COORDINATOR, Kind
from .inbox import CoordinatorInbox
from .waiting import Patience, missing

HANDLES = FROM_COORDINATOR | {Kind.MOVED}  # the kinds `on_message` takes (MOVED comes from a peer)


class CoordinatorClient(CoordinatorInbox):
    """A node's side of the coordinator: the calls any thread makes and waits in (join, declare, barrier,
    bye, leave, clocks); `on_message()` and `check()` (CoordinatorInbox) are fed by pskv-server."""

    # ---- calls from any thread ------------------------------------------------------------------
    def join(self, address: str, num_nodes: int) -> dict[int, str]:
        """Announce this node and wait for all others; returns rank -> address of every node."""
        self._send(Kind.HELLO, {"address": address, "num_nodes": num_nodes})
        timeout = self.config.rendezvous_timeout + 5  # the coordinator's own verdict comes first
        self._wait(
            lambda: self.view.welcomed,
            timeout,
            lambda: CoordinatorUnreachable(
                f"node {self.rank}: no answer from the coordinator at {self.config.coordinator} within {timeout:g} s; "
                "is it running and reachable (PSKV_COORDINATOR)?"
            ),
        )
        assert self.view.addresses is not None  # (welcomed)
        return self.view.addresses

    def joined(self, payload: dict) -> None:
        """This node joined a running cluster (membership.join): its barriers start where the others' next is."""
        with self._cond:
            self._barrier_gen = int(payload["barrier"])
            self._joined = {
                "barrier": int(payload["barrier"]),
                "members": len(payload["alive"]),
                "tables": int(payload.get("tables", 0)),
            }
            self._last_heard = time.monotonic()

    def await_entry(self, timeout: float) -> None:
        """With backups, on a node that joined: once it declared every table declared before it came,
        wait until it entered the chains and its copies are filled (membership.joining); return at
        once before that, and on other nodes. Raises ClusterError after `timeout` seconds."""
        with self._cond:
            joined = self._joined
            due = self.view.backups and joined is not None and self._decl_seq >= joined["tables"]
        if due:
            assert joined is not None  # (due says so)
            self._wait(
                lambda: 0 < self._entered <= self._synced,
                timeout,
                lambda: ClusterError(
                    f"node {self.rank} joined the cluster and declared its {joined['tables']} table(s), but its "
                    f"copies were not filled within {timeout:g} s (entered the chains in epoch {self._entered or '-'}, "
                    f"copies filled in epoch {self._synced or '-'}); node.debug_state() on every node tells what waits"
                ),
            )

    def declare(self, spec: dict) -> None:
        """Collective: wait until every node declared its table #seq; TableMismatch if they differ,
        ConfigError if the cluster cannot hold it (an aggregated table once a node joined). On a node
        that joined a cluster with backups, from the last table declared before it came on, it also
        waits until its copies are filled (`await_entry`)."""
        with self._cond:
            seq = self._decl_seq
            self._decl_seq += 1
            self._specs[seq] = spec
        self._send(Kind.TABLE_DECL, {"seq": seq, "spec": spec})
        self._wait(
            lambda: seq in self._decl_results,
            None,
            None,
            lambda: (
                f"node {self.rank}: still waiting for {missing(self.view.alive, self._declaring.get(str(seq), ()))} in "
                f"table declaration #{seq} ({spec.get('name', '?')!r})",
                "; every node must declare the same tables in the same order",
            ),
            self.config.collective_timeout,
        )
        with self._cond:
            error, config = self._decl_results.pop(seq)
            self._answered.add(seq)
        if error:
            raise ConfigError(error) if config else TableMismatch(error)
        self.await_entry(self.config.collective_timeout)  # a joiner's last table of those before it: its copies

    def barrier(self, timeout: float | None = None) -> None:
        """Node-level barrier over all alive nodes."""
        with self._cond:
            gen = self._barrier_gen
            self._barrier_gen += 1
        self._send(Kind.BARRIER, {"gen": gen})
        self._wait(
            lambda: gen in self._released,
            timeout,
            lambda: self._barrier_timeout(gen, timeout),
            lambda: (
                f"node {self.rank}: still waiting for {missing(self.view.alive, self._arrivals.get(str(gen), ()))} in "
                f"barrier #{gen}"
            ),
            timeout or self.config.collective_timeout,
        )

    def _barrier_timeout(self, gen: int, timeout: float | None) -> BarrierTimeout:
        arrived = set(self._arrivals.get(str(gen), [])) | {self.rank}
        missing = sorted(set(range(len(self.view.addresses or {}))) - arrived)
        return BarrierTimeout(
            f"barrier #{gen} did not complete within {timeout} s on node {self.rank}; nodes {missing} never arrived",
            missing,
        )

    def bye(self, timeout: float | None = None) -> bool:
        """Orderly leave: wait until every node said bye. False if that did not happen."""
        with self._cond:
            self._bye_sent = True
        self._send(Kind.BYE)
        try:
            self._wait(lambda: self._shutdown_ok, timeout, lambda: TimeoutError("bye"))
        except (NodeFailure, CoordinatorUnreachable, TimeoutError):
            return False
        return True

    def leave(self, timeout: float | None) -> None:
        """Ask to leave the cluster for good (backups); returns once the others went on without this
        node. Raises ClusterError if the coordinator refused (it says why) or `timeout` passed."""
        with self._cond:
            self._leave = "asked"
        self._send(Kind.LEAVE)
        self._wait(
            lambda: self._leave != "asked",
            timeout,
            lambda: ClusterError(f"node {self.rank}: the coordinator did not let it leave within {timeout} s"),
        )
        with self._cond:
            if self._leave != "left":
                raise ClusterError(f"node {self.rank} cannot leave: {self._leave}")

    def leave_plan(self, timeout: float) -> list[int]:
        """Without backups, step 1: ask to leave; returns the range -> manager map to hand over to.
        Raises ClusterError if the coordinator refused (it says why)."""
        with self._cond:
            self._leave, self._plan = "asked", None
        self._send(Kind.LEAVE, {"phase": "ask"})
        self._wait(
            lambda: self._leave != "asked",
            timeout,
            lambda: ClusterError(f"node {self.rank}: the coordinator did not answer its leave within {timeout} s"),
        )
        with self._cond:
            if self._leave != "go":
                error, self._leave = self._leave, None
                raise ClusterError(f"node {self.rank} cannot leave: {error}")
            assert self._plan is not None  # ("go" came with it)
            return list(self._plan)

    def leave_handed(self, managers: list[int], timeout: float) -> None:
        """Without backups, step 2: the rows are handed over; returns once the others went on without
        this node and no request of theirs can still reach it."""
        with self._cond:
            self._leave = "handed"
        self._send(Kind.LEAVE, {"phase": "ready", "managers": managers})
        self._wait(
            lambda: self._leave == "done",
            timeout,
            lambda: ClusterError(f"node {self.rank}: the others did not let it go within {timeout} s"),
        )

    def drained(self, epoch: int) -> None:
        """Every request this node made before membership epoch `epoch` is answered (a node left)."""
        self._send(Kind.DRAINED, {"epoch": int(epoch)})

    def abort(self, reason: str) -> None:
        self._send(Kind.ABORT, {"reason": reason})

    def report_clock(self, clock: int, seq: int) -> None:
        """Tell the coordinator that every update stamped < clock of this node is applied.

        `seq` orders the reports: they are sent from several threads, whose sockets do not keep
        order between them."""
        with self._cond:
            if seq > self._clock_report[1]:
                self._clock_report = (int(clock), int(seq))
        self._send(Kind.CLOCK, {"clock": int(clock), "seq": int(seq)})

    def synced(self, epoch: int) -> None:
        """Every key range this node backs up in `epoch` is whole again (server.failover)."""
        with self._cond:
            self._synced = max(self._synced, int(epoch))
            self._cond.notify_all()
        self._send(Kind.SYNCED, {"epoch": int(epoch)})

    def behind(self, clock: int) -> str:
        """The nodes whose applied clock is below `clock`, as the coordinator last told (for wait logs)."""
        late = {int(r): c for r, c in self._clocks.items() if c < clock}
        return ", ".join(f"node {r} at {c}" for r, c in sorted(late.items())) or "no node known to be behind"

    def _wait(
        self,
        ready: Callable[[], bool],
        timeout: float | None,
        on_timeout,
        what: Callable[[], str | tuple[str, str]] | None = None,
        limit: float | None = None,
    ) -> None:
        """Wait until ready(); `what()` says what it waits for, logged every wait_log_interval s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        patience = Patience(self.config.wait_log_interval, limit, what) if what is not None else None
        with self._cond:
            while not ready():
                if patience is not None:  # (logs outside _cond: what() reads dicts TICKs replace whole)
                    self._cond.release()
                    try:
                        patience.check()
                    finally:
                        self._cond.acquire()
                if self._abort is not None:
                    raise CoordinatorUnreachable(f"node {self.rank}: the coordinator aborted: {self._abort}")
                self.events.check()
                if self.failure is not None:
                    raise copy.copy(self.failure) from self.failure
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise on_timeout()
                self._cond.wait(0.2 if left is None else min(0.2, left))
