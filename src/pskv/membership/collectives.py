"""Collectives: what every member takes part in, counted by the coordinator.

    node  -- TABLE_DECL{seq, spec} -->  coordinator   all alive nodes declared #seq: TABLE_OK{seq, error}
                                                      (a mismatch, membership.mismatch; or a table the
                                                      cluster cannot hold); a joiner's late one: at once
    node  -- BARRIER{gen} ---------->   coordinator   all alive nodes arrived: BARRIER_RELEASE{gen}
    node  -- CLOCK{clock, seq} ----->   coordinator   min over alive nodes changed: GLOBAL_CLOCK{clock}
    node  -- BYE ------------------->   coordinator   (a node that said bye holds nothing up any more)
          <-- STALLED{reason, missing}                a declaration or barrier that some nodes did not
                                                      join within collective_timeout, or left without
    coordinator -- TICK{barriers, tables, clocks} --> nodes: who arrived where (their wait logs)

A node that joined the running cluster takes part in the barriers from the one after the highest
any node entered (`joined`), owes nothing to earlier declarations, and its workers start at the
global clock.

Threads and ownership: pskv-coord only, as part of its `Coordinator`; members and their states
are the shared `Members` record's.
"""

from __future__ import annotations

import logging
import time

from ..net.wire import Kind
from . import mismatch
from .members import Members

log = logging.getLogger(__name__)


class Collectives:
    """Table declarations, barriers, clocks and stalls (pskv-coord)."""

    def __init__(self, members: Members) -> None:
        self.members = members
        self.decls: dict[int, dict[int, dict]] = {}  # seq -> rank -> table config, until all declared
        self.decls_done: set[int] = set()  # seqs answered with TABLE_OK
        self.decl_specs: dict[int, dict] = {}  # seq -> the spec every node declared (checks a joiner's)
        self.declared: dict[int, int] = {}  # rank -> how many tables it declared
        self.barriers: dict[int, set[int]] = {}  # generation -> ranks arrived
        self.barrier_top = -1  # the highest barrier generation any node entered
        self.since: dict[tuple[str, int], float] = {}  # ("table"|"barrier", seq) -> first arrival
        self.clocks: dict[int, int] = {}  # rank -> its applied clock (SSP/BSP); 0 until reported
        self.clock_seq: dict[int, int] = {}  # rank -> sequence number of its last report
        self.global_clock = 0  # min over alive nodes, last broadcast
        self.joined: dict[int, tuple[int, int]] = {}  # joiner -> (first barrier it takes part in, members then)

    # ---- table declarations -------------------------------------------------------------------
    def declare(self, rank: int, p: dict) -> str | None:
        """TABLE_DECL from `rank`. Returns the error of a joiner's late declaration (one the others
        made before it came, answered at once) that differs from theirs; None otherwise."""
        m, seq = self.members, int(p["seq"])
        self.declared[rank] = max(self.declared.get(rank, 0), seq + 1)
        if seq in self.decl_specs:  # a node that joined later declares what the others did before it
            first = self.decl_specs[seq]
            error = None if p["spec"] == first else mismatch.joiner(seq, first, rank, p["spec"])
            m.send(rank, Kind.TABLE_OK, {"seq": seq, "error": error})
            return error
        got = self.decls.setdefault(seq, {})
        got[rank] = p["spec"]
        self.since.setdefault(("table", seq), time.monotonic())
        left = sorted(r for r, s in m.state.items() if s == "bye" and self.declared.get(r, 0) <= seq)
        if left:
            self.stall(
                f"table declaration #{seq} ({p['spec'].get('name', '?')!r} by node {rank}): node(s) {left} "
                "called shutdown() without declaring it",
                left,
            )
            return None
        self._complete(seq)
        return None

    def _complete(self, seq: int) -> None:
        got = self.decls[seq]
        if all(r in got for r in self.members.ranks()):
            del self.decls[seq]
            self.decls_done.add(seq)
            self.since.pop(("table", seq), None)
            first = self.decl_specs[seq] = got[min(got)]
            error, refused = mismatch.between_nodes(seq, got), self.refused(first)
            self.members.broadcast(
                Kind.TABLE_OK, {"seq": seq, "error": error or refused, "config": bool(refused and not error)}
            )

    def refused(self, spec: dict) -> str | None:
        """Why a table every node declared alike cannot be made in this cluster (None: it can): one that
        aggregates per node, once a node that joined the running cluster is a member."""
        joiners = sorted(r for r in self.joined if self.members.state.get(r) in ("alive", "bye"))
        if not spec.get("aggregate") or not joiners:
            return None
        return (
            f"table {spec.get('name')!r} aggregates per node (NodeAggregate), which node(s) {joiners} that "
            f"joined the running cluster cannot take part in (its per-node arrays are sized by the "
            f"{self.members.num_nodes} nodes the cluster started with); declare it without aggregate=, or "
            "before any node joins"
        )

    def aggregated(self) -> list[str]:
        """Tables that aggregate per node, declared or still being declared: either refuses a join (their
        level-2 arrays are sized by the nodes the cluster started with)."""
        specs = [*self.decl_specs.values(), *(spec for got in self.decls.values() for spec in got.values())]
        return sorted({str(spec.get("name")) for spec in specs if spec.get("aggregate")})

    # ---- barriers and clocks ------------------------------------------------------------------
    def barrier(self, rank: int, p: dict) -> None:
        gen = int(p["gen"])
        self.barrier_top = max(self.barrier_top, gen)
        self.barriers.setdefault(gen, set()).add(rank)
        self.since.setdefault(("barrier", gen), time.monotonic())
        self._release_barriers()

    def _release_barriers(self) -> None:
        alive = self.members.ranks()
        for gen in sorted(self.barriers):
            if {r for r in alive if self.joined.get(r, (0,))[0] <= gen} <= self.barriers[gen]:
                self.release(gen)

    def release(self, gen: int) -> None:
        """BARRIER_RELEASE{gen} to every alive node."""
        del self.barriers[gen]
        self.since.pop(("barrier", gen), None)
        self.members.broadcast(Kind.BARRIER_RELEASE, {"gen": gen})

    def clock(self, rank: int, p: dict) -> None:
        seq = int(p["seq"])
        if seq <= self.clock_seq.get(rank, 0):
            return  # overtaken by a later report
        self.clock_seq[rank] = seq
        self.clocks[rank] = int(p["clock"])
        self._release_clock()

    def _release_clock(self) -> None:
        alive = self.members.ranks()
        if not alive:
            return
        clock = min(self.clocks.get(r, 0) for r in alive)
        if clock != self.global_clock:
            self.global_clock = clock
            self.members.broadcast(Kind.GLOBAL_CLOCK, {"clock": clock})

    # ---- members come and go ------------------------------------------------------------------
    def join(self, rank: int, members: int) -> int:
        """A node joins the running cluster as the `members`-th member; returns the number of table
        declarations begun before it came (it owes none of them)."""
        self.clocks[rank] = self.global_clock  # its workers start at the global clock
        self.declared[rank] = 0
        self.joined[rank] = (self.barrier_top + 1, members)
        return max([*self.decl_specs, *self.decls], default=-1) + 1

    def bye(self, rank: int) -> bool:
        """`rank` said BYE (its state is "bye" already): it no longer holds barriers or clocks up.
        False if it left a declaration without declaring it: the cluster stalls."""
        for seq, got in sorted(self.decls.items()):
            if rank not in got:
                self.stall(
                    f"table declaration #{seq} ({next(iter(got.values())).get('name', '?')!r}, declared by "
                    f"node(s) {sorted(got)}): node(s) {[rank]} called shutdown() without declaring it",
                    [rank],
                )
                return False
        self._release_barriers()
        self._release_clock()
        return True

    def settle(self) -> None:
        """A member is gone: declarations, barriers and clocks stop waiting for it."""
        for seq in sorted(self.decls):
            self._complete(seq)
        self._release_barriers()
        self._release_clock()

    def restore(self, rank: int, p: dict) -> None:
        """A coordinator that took over learns what `rank` declared and waits in (its REJOIN)."""
        for key, spec in p["decls"].items():
            seq = int(key)  # (a JSON object key: a string on the wire)
            if seq not in self.decls_done:
                self.decls.setdefault(seq, {})[rank] = spec
                self.since.setdefault(("table", seq), time.monotonic())
            self.declared[rank] = max(self.declared.get(rank, 0), seq + 1)
        for gen in p["barriers"]:
            self.barriers.setdefault(int(gen), set()).add(rank)
            self.since.setdefault(("barrier", int(gen)), time.monotonic())
        clock, seq = (int(x) for x in p["clock"])
        if seq > self.clock_seq.get(rank, 0):
            self.clocks[rank], self.clock_seq[rank] = clock, seq
        if "joined" in p:  # a node that joined the running cluster: its first barrier
            self.joined[rank] = (int(p["joined"]["barrier"]), int(p["joined"]["members"]))

    # ---- stalls -------------------------------------------------------------------------------
    def stall(self, reason: str, missing: list[int]) -> None:
        """A collective cannot complete: tell every node, which all stop with CollectiveStalled."""
        m = self.members
        if m.stalled:
            return
        m.stalled = True
        reason += (
            "; every node stops. Declare the same tables in the same order and call barrier() the same "
            "number of times on every node"
        )
        log.error("coordinator: %s", reason)
        m.failures.append((missing[0] if missing else -1, reason))
        m.broadcast(Kind.STALLED, {"reason": reason, "missing": missing}, states=("alive", "bye"))

    def overdue(self, now: float) -> None:
        """Fail the oldest collective that waited longer than collective_timeout, naming who is missing."""
        timeout = self.members.config.collective_timeout
        for (what, seq), since in sorted(self.since.items(), key=lambda item: item[1]):
            if now - since <= timeout:
                return
            arrived = set(self.decls.get(seq, {})) if what == "table" else self.barriers.get(seq, set())
            missing = sorted(self.members.ranks() - arrived)
            doing = "; ".join(f"node {r} {self._waits_in(r)}" for r in missing)
            name = f"table declaration #{seq}" if what == "table" else f"barrier #{seq}"
            self.stall(
                f"{name}: node(s) {missing} did not join within {timeout:g} s (PSKV_COLLECTIVE_TIMEOUT) "
                f"while node(s) {sorted(arrived)} waited ({doing})",
                missing,
            )
            return

    def _waits_in(self, rank: int) -> str:
        ins = [f"table declaration #{seq}" for seq, got in self.decls.items() if rank in got]
        ins += [f"barrier #{gen}" for gen, got in self.barriers.items() if rank in got]
        return "waits in " + ", ".join(ins) if ins else "is alive (heartbeats arrive) but in no collective"

    def tick(self) -> dict:
        """What a TICK tells the nodes of the collectives under way (their wait logs)."""
        return {
            "barriers": {str(g): sorted(r) for g, r in self.barriers.items()},
            "tables": {str(seq): sorted(got) for seq, got in self.decls.items()},
            "clocks": {str(r): c for r, c in self.clocks.items()},
        }
