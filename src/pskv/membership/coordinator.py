"""Coordinator: rendezvous, table declarations, barriers, orderly shutdown and heartbeats.

`Coordinator` is the service (one per cluster: in `pskv launch`, or in node 0 when none runs);
`CoordinatorClient` is each node's side of it. Both speak control messages (protocol.control).

    node  -- HELLO{rank,address} -->  coordinator    all N joined: WELCOME{cluster, addresses}
    node  -- HELLO{join,address} -->  coordinator    a running cluster: JOINED{rank, ...} to it, MEMBERSHIP{joined}
                                                     to the others (membership.join)
    node  -- TABLE_DECL{seq,spec} ->  coordinator    all agree: TABLE_OK, else TABLE_OK{error}
    node  -- BARRIER{gen} -------->   coordinator    all alive nodes arrived: BARRIER_RELEASE{gen}
    node  -- CLOCK{clock,seq} ---->   coordinator    min over alive nodes changed: GLOBAL_CLOCK{clock}
    node  -- BYE ----------------->   coordinator    all said BYE: SHUTDOWN_OK
    node  -- HEARTBEAT / ABORT --->   coordinator    silence > failure_timeout or ABORT: NODE_FAILED{rank}
                                                     with backups: MEMBERSHIP{epoch, alive, dead}
    node  -- SYNCED{epoch} ------->   coordinator    every range it backs up is filled again
    node  -- LEAVE --------------->   coordinator    with backups: MEMBERSHIP{..., left} without it, or LEFT{error}
                                                     without: LEFT{go: range -> new manager}; the node
                                                     hands its rows and ranges over (server.handoff), then
    node  -- LEAVE{ready} -------->   coordinator    MEMBERSHIP{..., managers, leaving}; every member
    node  -- DRAINED{epoch} ------>   coordinator    answers once its earlier requests are; then LEFT{done}
    coordinator -- TICK (every heartbeat_interval) -> nodes: a silent coordinator is a failure too
    coordinator -- STALLED{reason, missing} -> nodes: a table declaration or barrier that some
                   nodes did not join within collective_timeout, or left (BYE) without joining

Threads and ownership: `Coordinator` runs in its own thread, pskv-coord, which owns its
Transport and all of its state; other threads reach it only through `_control`, a
SimpleQueue (report_failure, close). `CoordinatorClient` is fed by the node's pskv-server
thread (`handle`, `check`) and called by any thread (`declare`, `barrier`, `bye`); its state
is guarded by `_cond`, which is never held while sending.
"""

from __future__ import annotations

import dataclasses
import errno as errno_codes
import logging
import queue
import random
import threading
import time

from ..config import ConfigError, NodeConfig, split_address
from ..net import auth
from ..net.drops import peer_of
from ..net.transport import Transport
from ..placement.chains import Chains
from ..errors import ProtocolError, TransportError
from ..net.wire import COORDINATOR, Kind, control, control_payload, frame_bytes, unpack_header
from . import mismatch
from .joining import Joining

log = logging.getLogger(__name__)


class Coordinator(Joining):
    """The cluster's coordinator service. `start()` it, give nodes `address`, `close()` it."""

    def __init__(self, num_nodes: int, host: str = "127.0.0.1", port: int = 0,
                 config: NodeConfig | None = None, *, host_rank: int | None = None, term: int = 0) -> None:
        self.num_nodes = num_nodes
        self.config = config or NodeConfig()
        self.host_rank = host_rank  # the node whose process runs this coordinator (None: a launcher)
        self.term = term  # stamped on every message: 0, or the epoch in which it took over (membership.takeover)
        self._transport = Transport(host, port=port, linger=2.0, send_timeout=self.config.failure_timeout,
                                    keys=auth.keys_for(self.config))
        self._drops = self._transport.drops  # what it drops: counted per peer, one log line a minute (net.drops)
        self._drops.what = "the coordinator"
        self.address = self._transport.address
        self.cluster = random.randrange(1, 1 << 32)
        self._control: queue.SimpleQueue = queue.SimpleQueue()  # (verb, args) from other threads
        self._thread = threading.Thread(target=self._run, name="pskv-coord", daemon=True)
        # state below: pskv-coord only
        self._addresses: dict[int, str] = {}
        self._state: dict[int, str] = {}  # rank -> "alive" | "bye" | "failed" | "leaving" | "left"
        self._last_seen: dict[int, float] = {}
        self._decls: dict[int, dict[int, dict]] = {}  # seq -> rank -> table config
        self._decls_done: set[int] = set()  # seqs answered with TABLE_OK
        self._barriers: dict[int, set[int]] = {}  # generation -> ranks arrived
        self._since: dict[tuple[str, int], float] = {}  # ("table"|"barrier", seq) -> first arrival
        self._declared: dict[int, int] = {}  # rank -> how many tables it declared
        self._stalled = False  # a STALLED went out: the cluster is stopping
        self._clocks: dict[int, int] = {}  # rank -> its applied clock (SSP/BSP); 0 until reported
        self._global_clock = 0  # min over alive nodes, last broadcast
        self._clock_seq: dict[int, int] = {}  # rank -> sequence number of its last report
        self._welcomed = False
        self._finished = False
        self._epoch = 1  # the membership epoch (backups); WELCOME starts epoch 1
        self._chains: Chains | None = None  # backups: the chains of this epoch
        self._whole: list[set[int]] = []  # backups: range -> the nodes whose copy of it is whole
        self._low: dict[int, int] = {}  # rank -> its low watermark of request ids (from heartbeats)
        self._managers = list(range(num_nodes))  # key range -> its manager (changes when a node leaves, no backups)
        self._leaving: dict[int, dict] = {}  # without backups: rank -> {"epoch", "drained"} of a node handing over
        self._next_rank = num_nodes  # the rank the next node that joins gets (ranks are never reused)
        self._joined: dict[int, tuple[int, int]] = {}  # rank -> (first barrier it takes part in, members then)
        self._barrier_top = -1  # the highest barrier generation any node entered
        self._decl_specs: dict[int, dict] = {}  # seq -> the spec every node declared (checks a joiner's)
        self._outside: dict[int, int] = {}  # backups: joiner -> declarations it owes before it enters the chains
        self.failures: list[tuple[int, str]] = []  # (rank, reason), for the launcher's report

    def start(self) -> "Coordinator":
        self._started = time.monotonic()
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
            while not self._finished:
                if not self._drain_control():
                    break
                frames = self._transport.recv(min(0.05, interval))
                if frames is not None:
                    self._receive(frames)
                now = time.monotonic()
                if now - last_turn > self.config.failure_timeout / 2:
                    self._paused(now)
                last_turn = now
                if now >= next_tick:
                    next_tick = now + interval
                    self._tick(now)
        except Exception:
            log.exception("coordinator crashed")
        finally:
            self._transport.close()

    def _paused(self, now: float) -> None:
        """This process did not run for a while (SIGSTOP, a swap storm): the nodes' silence meanwhile is
        ours, not theirs. Count them as heard now; what they sent is still to be read (e.g. that a
        node took the coordinator over while we were stopped), before anyone is failed for silence."""
        for rank in self._last_seen:
            self._last_seen[rank] = now

    def _drain_control(self) -> bool:
        while True:
            try:
                verb, args = self._control.get_nowait()
            except queue.Empty:
                return True
            if verb == "close":
                return False
            if verb == "fail":
                self._fail(*args)

    def _receive(self, frames: list) -> None:
        try:
            header = unpack_header(frame_bytes(frames[0]))
            payload = control_payload(header, frames)
        except ProtocolError as exc:
            self._drops.add(peer_of(frames), str(exc))
            return
        rank = header.sender
        if header.kind == Kind.HELLO:
            self._hello(rank, payload)
            return
        if header.cluster != self.cluster or rank not in self._state:
            self._drops.add(peer_of(frames, rank), f"{header!r}: not from this cluster")
            return
        self._last_seen[rank] = time.monotonic()
        handler = self._handler_map.get(header.kind)
        if self._state[rank] == "failed":  # it stalled and came back: tell it, not only the others
            self._send(rank, Kind.NODE_FAILED, self._failure_payload(rank))
            return
        if handler is not None:
            try:
                handler(rank, payload)
            except (KeyError, TypeError, ValueError) as exc:
                self._drops.add(peer_of(frames, rank), f"{header!r} with a malformed payload: {exc!r}")

    def _handlers(self) -> dict:
        return {Kind.TABLE_DECL: self._decl, Kind.BARRIER: self._barrier, Kind.BYE: self._bye,
                Kind.CLOCK: self._clock, Kind.HEARTBEAT: self._heartbeat, Kind.SYNCED: self._synced_in,
                Kind.LEAVE: self._leave, Kind.DRAINED: self._drained,
                Kind.ABORT: lambda r, p: self._fail(r, p.get("reason", "aborted"))}

    def _send(self, rank: int, kind: Kind, payload: dict | None = None) -> None:
        try:
            self._transport.send(rank, control(kind, self.cluster, COORDINATOR, payload, self.term))
        except Exception as exc:  # a dead node's full queue must not stop the coordinator
            log.warning("coordinator could not send %s to node %d: %s", kind.name, rank, exc)

    def _broadcast(self, kind: Kind, payload: dict | None = None, states=("alive",)) -> None:
        for rank, state in self._state.items():
            if state in states:
                self._send(rank, kind, payload)

    def _hello(self, rank: int, p: dict) -> None:
        address = str(p.get("address", ""))
        try:
            split_address(address)
        except ConfigError:
            self._drops.add(peer_of([], rank), f"a HELLO with address {address!r}")
            return
        if p.get("join"):
            self._join(address)
            return
        problem = None
        if p.get("num_nodes") != self.num_nodes:
            problem = f"node {rank} thinks the cluster has {p.get('num_nodes')} nodes, the coordinator {self.num_nodes}"
        elif not 0 <= rank < self.num_nodes:
            problem = f"rank {rank} is outside [0, {self.num_nodes})"
        elif rank in self._addresses or self._welcomed:
            anyone = "" if self._transport.keys else "; with no secret (PSKV_SECRET_FILE) any process can take a rank"
            problem = f"rank {rank} joined twice (first from {self._addresses.get(rank)}, now from {address}){anyone}"
        if problem:  # answer on a one-off socket: never replace the address of a rank that joined
            self._transport.send_once(address, control(Kind.ABORT, self.cluster, COORDINATOR,
                                                       {"reason": problem + "; check PSKV_RANK and PSKV_NUM_NODES"}))
            return
        self._transport.set_address(rank, address)
        self._addresses[rank] = address
        self._state[rank] = "alive"
        self._last_seen[rank] = time.monotonic()
        log.info("node %d joined from %s (%d/%d)", rank, address, len(self._addresses), self.num_nodes)
        if len(self._addresses) == self.num_nodes:
            self._welcomed = True
            if self.config.backups:
                self._chains = Chains(self.num_nodes, self.config.backups, self._addresses)
                self._whole = [set(self._chains.chain(r)) for r in range(self.num_nodes)]
            self._broadcast(Kind.WELCOME, {"addresses": {str(r): a for r, a in self._addresses.items()},
                                           "host": self.host_rank})

    def _heartbeat(self, rank: int, p: dict) -> None:
        if "low" in p:
            self._low[rank] = int(p["low"])

    def _synced_in(self, rank: int, p: dict) -> None:
        """Every copy `rank` holds in this epoch is filled (its snapshots came)."""
        if int(p["epoch"]) == self._epoch and self._chains is not None:
            for r, whole in enumerate(self._whole):
                if rank in self._chains.chain(r):
                    whole.add(rank)

    def _decl(self, rank: int, p: dict) -> None:
        seq = int(p["seq"])
        if seq in self._decl_specs:  # a node that joined later declares what the others did before it
            first = self._decl_specs[seq]
            error = None if p["spec"] == first else mismatch.joiner(seq, first, rank, p["spec"])
            self._declared[rank] = max(self._declared.get(rank, 0), seq + 1)
            self._send(rank, Kind.TABLE_OK, {"seq": seq, "error": error})
            if error and rank in self._outside:
                self._outside[rank] = 1 << 62  # its tables differ: it never enters the chains
            self._enter_due()
            return
        got = self._decls.setdefault(seq, {})
        got[rank] = p["spec"]
        self._since.setdefault(("table", seq), time.monotonic())
        self._declared[rank] = max(self._declared.get(rank, 0), seq + 1)
        left = sorted(r for r, s in self._state.items() if s == "bye" and self._declared.get(r, 0) <= seq)
        if left:
            self._stall(f"table declaration #{seq} ({p['spec'].get('name', '?')!r} by node {rank}): node(s) {left} "
                        "called shutdown() without declaring it", left)
            return
        self._complete_decl(seq)
        self._enter_due()

    def _complete_decl(self, seq: int) -> None:
        got = self._decls[seq]
        if all(r in got for r, s in self._state.items() if s == "alive"):
            del self._decls[seq]
            self._decls_done.add(seq)
            self._since.pop(("table", seq), None)
            first = self._decl_specs[seq] = got[min(got)]
            error, refused = mismatch.between_nodes(seq, got), self._refused(first)
            self._broadcast(Kind.TABLE_OK, {"seq": seq, "error": error or refused,
                                            "config": bool(refused and not error)})

    def _barrier(self, rank: int, p: dict) -> None:
        gen = int(p["gen"])
        self._barrier_top = max(self._barrier_top, gen)
        self._barriers.setdefault(gen, set()).add(rank)
        self._since.setdefault(("barrier", gen), time.monotonic())
        self._release_barriers()

    def _release_barriers(self) -> None:
        alive = {r for r, s in self._state.items() if s == "alive"}
        for gen in sorted(self._barriers):
            if {r for r in alive if self._joined.get(r, (0,))[0] <= gen} <= self._barriers[gen]:
                del self._barriers[gen]
                self._since.pop(("barrier", gen), None)
                self._broadcast(Kind.BARRIER_RELEASE, {"gen": gen})

    def _clock(self, rank: int, p: dict) -> None:
        seq = int(p["seq"])
        if seq <= self._clock_seq.get(rank, 0):
            return  # overtaken by a later report
        self._clock_seq[rank] = seq
        self._clocks[rank] = int(p["clock"])
        self._release_clock()

    def _release_clock(self) -> None:
        alive = [r for r, s in self._state.items() if s == "alive"]
        if not alive:
            return
        clock = min(self._clocks.get(r, 0) for r in alive)
        if clock != self._global_clock:
            self._global_clock = clock
            self._broadcast(Kind.GLOBAL_CLOCK, {"clock": clock})

    def _bye(self, rank: int, p: dict) -> None:
        self._state[rank] = "bye"
        for seq, got in sorted(self._decls.items()):
            if rank not in got:
                self._stall(f"table declaration #{seq} ({next(iter(got.values())).get('name', '?')!r}, declared by "
                            f"node(s) {sorted(got)}): node(s) {[rank]} called shutdown() without declaring it", [rank])
                return
        self._release_barriers()  # a node that left no longer holds barriers up
        self._release_clock()  # nor clocks
        self._finish_if_done()

    def _fail(self, rank: int, reason: str) -> None:
        if self._state.get(rank) == "failed":
            return
        self._state[rank] = "failed"
        self.failures.append((rank, reason))
        log.info("node %d failed: %s", rank, reason)  # the launcher and the nodes report it
        if not self._welcomed:  # the cluster cannot form: let the nodes that joined stop now
            self._broadcast(Kind.ABORT, {"reason": f"node {rank} failed before the cluster formed: {reason}"})
            return
        if self._survivable(rank, reason):
            return
        self._broadcast(Kind.NODE_FAILED, self._failure_payload(rank), states=("alive", "bye"))
        if rank in self._addresses:
            self._send(rank, Kind.NODE_FAILED, self._failure_payload(rank))  # if it only stalled, it learns why

    def _leave(self, rank: int, p: dict) -> None:
        """node.leave(): with backups, a new epoch without `rank` if every key range keeps a whole copy
        on the others (as for a death, but no failure); else LEFT{error}, and it stays. Without
        backups, in two steps (see the module's table): go, then ready."""
        if not self.config.backups:
            self._leave_handing(rank, p)
            return
        error = None
        if self._chains is None:
            error = "the cluster has not formed yet"
        elif rank == self.host_rank:
            error = f"node {rank} runs the coordinator; it cannot leave (start the cluster with pskv launch)"
        elif self._stalled:
            error = "the cluster is stopping"
        else:
            live = {r for r, s in self._state.items() if s in ("alive", "bye")} - {rank}
            lost = Chains(self.num_nodes, self.config.backups, self._chain_members(live)).unheaded(
                [whole - {rank} for whole in self._whole])
            if lost:
                error = (f"key range(s) {lost} would have no whole copy at their head without node {rank} (copies "
                         "are still being filled after an earlier change); try again in a moment")
        if error is not None:
            self._send(rank, Kind.LEFT, {"error": error})
            return
        self._state[rank] = "left"
        self._survivable(rank, "it left the cluster", left=True)

    def _leave_handing(self, rank: int, p: dict) -> None:
        """Without backups: LEAVE says go (each range `rank` manages goes to the member that manages
        the fewest), LEAVE{ready} (the rows are handed over) starts the epoch without it."""
        alive = sorted(r for r, s in self._state.items() if s == "alive")
        if p.get("phase") == "ready":
            if self._state.get(rank) != "alive" or rank not in self._leaving:
                return
            self._state[rank] = "leaving"
            self._managers = [int(m) for m in p["managers"]]
            self._epoch += 1
            self._leaving[rank] = {"epoch": self._epoch, "drained": set()}
            live = sorted(r for r, s in self._state.items() if s in ("alive", "bye"))
            payload = {"epoch": self._epoch, "alive": live, "dead": rank, "reason": "it left the cluster",
                       "left": True, "managers": self._managers, "leaving": [rank],
                       "addresses": {str(r): self._addresses[r] for r in live}}
            log.warning("coordinator: node %d left; membership epoch %d goes on with nodes %s", rank, self._epoch, live)
            self._broadcast(Kind.MEMBERSHIP, payload, states=("alive", "bye"))
            self._send(rank, Kind.MEMBERSHIP, payload)
            self._after_change()
            self._drained(rank, {"epoch": self._epoch})  # (no other member: done at once)
            return
        error = None
        if rank == self.host_rank:
            error = f"node {rank} runs the coordinator; it cannot leave (start the cluster with pskv launch)"
        elif self._stalled:
            error = "the cluster is stopping"
        elif self._leaving and any(v.get("epoch") is None or len(v["drained"]) < len(alive) for v in
                                   self._leaving.values()):
            error = f"node(s) {sorted(self._leaving)} are leaving right now; try again in a moment"
        elif alive == [rank]:
            error = "it is the last member; call shutdown() instead"
        if error is not None:
            self._send(rank, Kind.LEFT, {"error": error})
            return
        others = [r for r in alive if r != rank]
        managers = list(self._managers)
        for r, m in enumerate(managers):
            if m == rank:  # to the member with the fewest ranges, the next on the ring first
                load = {o: managers.count(o) for o in others}
                managers[r] = min(others, key=lambda o: (load[o], (o - rank) % (max(others) + 1)))
        self._leaving[rank] = {"epoch": None, "drained": set()}
        self._send(rank, Kind.LEFT, {"go": managers})

    def _drained(self, rank: int, p: dict) -> None:
        """A member answered every request it made before a leave's epoch: when all have, the leaving
        node may go (nothing can reach it any more)."""
        for leaver, v in list(self._leaving.items()):
            if v["epoch"] is None or int(p["epoch"]) < v["epoch"]:
                continue
            v["drained"].add(rank)
            members = {r for r, s in self._state.items() if s in ("alive", "bye")}
            if members <= v["drained"] | {leaver}:
                del self._leaving[leaver]
                self._state[leaver] = "left"
                self._send(leaver, Kind.LEFT, {"done": True})
                self._finish_if_done()

    def _after_change(self) -> None:
        """A member is gone: collectives, barriers and clocks stop waiting for it."""
        for seq in sorted(self._decls):
            self._complete_decl(seq)
        self._release_barriers()
        self._release_clock()
        self._finish_if_done()

    def _finish_if_done(self) -> None:
        """Every member said bye (and no node is still handing over): let them all go."""
        if all(s != "alive" for s in self._state.values()) and not self._leaving:
            self._broadcast(Kind.SHUTDOWN_OK, states=("bye",))
            self._finished = True

    def _survivable(self, rank: int, reason: str, left: bool = False) -> bool:
        """With backups: go on without `rank` in a new epoch (MEMBERSHIP) if every key range's new
        head holds a whole copy; False: the cluster must stop (NODE_FAILED)."""
        if not self.config.backups or self._stalled or self._chains is None:
            return False
        live = {r for r, s in self._state.items() if s in ("alive", "bye")}
        self._outside.pop(rank, None)  # (a joiner that never entered the chains)
        for whole in self._whole:
            whole.discard(rank)
        chains = Chains(self.num_nodes, self.config.backups, self._chain_members(live))
        lost = chains.unheaded(self._whole)  # a head must hold a whole copy (a joiner's never heads)
        if not live or lost:  # every whole copy of a range was on dead nodes (the rest still filling)
            self.failures[-1] = (rank, f"{reason}; {self._lost_copies(lost, live)}")
            return False
        self._epoch += 1
        self._chains = chains
        payload = {"epoch": self._epoch, "alive": sorted(live), "dead": rank, "reason": reason, "left": left,
                   **self._outside_field()}
        log.warning("coordinator: node %d %s; membership epoch %d goes on with nodes %s", rank,
                    "left" if left else f"failed ({reason})", self._epoch, sorted(live))
        self._broadcast(Kind.MEMBERSHIP, payload, states=("alive", "bye"))
        self._send(rank, Kind.MEMBERSHIP, payload)  # if it only stalled, it learns it is out
        self._after_change()  # its workers leave barriers and clocks
        return True

    def _stall(self, reason: str, missing: list[int]) -> None:
        """A collective cannot complete: tell every node, which all stop with CollectiveStalled."""
        if self._stalled:
            return
        self._stalled = True
        reason += ("; every node stops. Declare the same tables in the same order and call barrier() the same "
                   "number of times on every node")
        log.error("coordinator: %s", reason)
        self.failures.append((missing[0] if missing else -1, reason))
        self._broadcast(Kind.STALLED, {"reason": reason, "missing": missing}, states=("alive", "bye"))

    def _stalled_collectives(self, now: float) -> None:
        """Fail the oldest collective that waited longer than collective_timeout, naming who is missing."""
        timeout = self.config.collective_timeout
        for (what, seq), since in sorted(self._since.items(), key=lambda item: item[1]):
            if now - since <= timeout:
                return
            arrived = set(self._decls.get(seq, {})) if what == "table" else self._barriers.get(seq, set())
            alive = {r for r, s in self._state.items() if s == "alive"}
            missing = sorted(alive - arrived)
            doing = "; ".join(f"node {r} {self._waits_in(r)}" for r in missing)
            name = f"table declaration #{seq}" if what == "table" else f"barrier #{seq}"
            self._stall(f"{name}: node(s) {missing} did not join within {timeout:g} s (PSKV_COLLECTIVE_TIMEOUT) "
                        f"while node(s) {sorted(arrived)} waited ({doing})", missing)
            return

    def _waits_in(self, rank: int) -> str:
        ins = [f"table declaration #{seq}" for seq, got in self._decls.items() if rank in got]
        ins += [f"barrier #{gen}" for gen, got in self._barriers.items() if rank in got]
        return "waits in " + ", ".join(ins) if ins else "is alive (heartbeats arrive) but in no collective"

    def _failure_payload(self, rank: int) -> dict:
        reason = next((r for k, r in self.failures if k == rank), "failed")
        return {"rank": rank, "address": self._addresses.get(rank, ""), "reason": reason}

    def _tick(self, now: float) -> None:
        if not self._welcomed:
            if now - self._started > self.config.rendezvous_timeout:
                missing = sorted(set(range(self.num_nodes)) - set(self._addresses))
                reason = (f"only {len(self._addresses)} of {self.num_nodes} nodes joined within "
                          f"{self.config.rendezvous_timeout:g} s; missing ranks {missing}")
                self._broadcast(Kind.ABORT, {"reason": reason, "missing": missing})
                self._finished = True
            return
        self._stalled_collectives(now)
        # nodes that said bye still serve their rows until everyone has: tick them and watch them too
        tick = {"barriers": {str(g): sorted(r) for g, r in self._barriers.items()},
                "tables": {str(seq): sorted(got) for seq, got in self._decls.items()},  # (the nodes' wait logs)
                "clocks": {str(r): c for r, c in self._clocks.items()}}
        if self.config.backups:
            tick["low"] = {str(r): w for r, w in self._low.items()}
        self._broadcast(Kind.TICK, tick, states=("alive", "bye", "leaving"))
        for rank, state in list(self._state.items()):
            silent = now - self._last_seen[rank]
            if state in ("alive", "bye", "leaving") and silent > self.config.failure_timeout:
                self._fail(rank, f"missed heartbeats, last seen {silent:.1f} s ago")


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
        raise TransportError(f"node 0 cannot start the coordinator at {cfg.coordinator}: "
                             f"{_bind_problem(exc, host, port)}") from exc
    return coord.start(), cfg


def _bind_problem(exc: TransportError, host: str, port: int) -> str:
    """Why binding the coordinator's port failed, and what to do, in words."""
    errno = getattr(exc.__cause__, "errno", None)
    if errno == errno_codes.EADDRINUSE:
        return (f"port {port} is already in use (another pskv cluster or another program holds it); choose a free "
                f"port in PSKV_COORDINATOR, or stop what listens there (`ss -ltnp | grep :{port}`)")
    if errno == errno_codes.EADDRNOTAVAIL:
        return (f"{host} is not an address of this machine; node 0 starts the coordinator when no launcher runs "
                "one, so PSKV_COORDINATOR must name node 0's machine (or use `pskv launch`)")
    return str(exc)
