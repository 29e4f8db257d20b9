"""View: who is in the cluster. Rank <-> address, the alive set, the cluster id and the membership epoch.

The view is the one place that says which ranks are members and which messages come from this
cluster (`admit`, the dispatcher's gate); key ranges are derived from it (`key_ranges`) and
handed to routing, and with backups the chain of live nodes that holds each range (`chains`).
Epoch 0 is "not welcomed yet"; WELCOME makes epoch 1 with every node alive; each MEMBERSHIP from
the coordinator (a node died and backups take over its ranges, or a node left) makes the next one.
Without backups a node that leaves hands its key ranges to other members first: `managers`
names the manager of every range (placement.ranges), and the node stays `leaving` (its messages
still admitted: it forwards what reached it late) until the coordinator lets it go. With backups
a node that joined is a member `outside` the chains until it declared every table the cluster
had (membership.joining): the chains are those of `alive - outside`.

Fencing: a message from a node that is not alive in this view is dropped, whatever it is (a
node that was stopped past failure_timeout and woke up must not change or answer anything); a
message stamped with a newer epoch than ours waits (HOLD) until our view catches up. The
coordinator stamps its term instead: a coordinator that another node took over (membership.
takeover) is not heard any more, and its successor waits until its MOVED came.

Threads and ownership: pskv-server writes it (WELCOME, MEMBERSHIP); every thread reads it.
Fields are replaced whole (never mutated in place), so readers need no lock.
"""

from __future__ import annotations

from ..net.dispatch import Verdict
from ..net.wire import COORDINATOR, FROM_COORDINATOR, Header, Kind
from ..placement.chains import Chains
from ..placement.ranges import KeyRanges, SparseRanges
from ..store.spec import SPARSE_ROWS

_FIRST_WORDS = frozenset({Kind.WELCOME, Kind.ABORT})  # all a node accepts from the coordinator before WELCOME


class View:
    def __init__(self, rank: int, num_nodes: int, backups: int = 0) -> None:
        self.rank = rank
        self.num_nodes = num_nodes
        self.backups = backups
        self.cluster = 0  # the cluster id the coordinator gave out; 0 until welcomed
        self.epoch = 0
        self.addresses: dict[int, str] | None = None  # rank -> address; None until welcomed
        self.alive: frozenset[int] = frozenset()
        self.chains: Chains | None = None  # with backups: who holds each key range now
        self.coordinator_host: int | None = None  # the node whose process runs the coordinator (None: a launcher)
        self.coordinator_term = 0  # which coordinator speaks: 0 the first, then the epoch it took over in
        self.managers: list[int] = list(range(num_nodes))  # key range -> the node that manages it
        self.leaving: frozenset[int] = frozenset()  # nodes that left but still forward what reached them
        self.outside: frozenset[int] = frozenset()  # with backups: members that joined and are in no chain yet

    @property
    def welcomed(self) -> bool:
        return self.addresses is not None

    def welcome(self, cluster: int, addresses: dict[int, str], host: int | None = None) -> None:
        """pskv-server: the coordinator's WELCOME: every node is up; `host` runs the coordinator."""
        self.cluster = cluster
        self.coordinator_host = host
        self.alive = frozenset(addresses)
        if self.backups:
            self.chains = Chains(self.num_nodes, self.backups, self.alive)
        self.epoch = 1
        self.addresses = dict(addresses)

    def joined(self, cluster: int, payload: dict) -> None:
        """This node joined a running cluster (membership.join): the cluster as JOINED describes it."""
        self.cluster = cluster
        host = payload.get("host")
        self.coordinator_host = None if host is None else int(host)
        self.managers = [int(m) for m in payload["managers"]]
        self.alive = frozenset(int(r) for r in payload["alive"])
        self.outside = frozenset(int(r) for r in payload.get("outside", ()))
        if self.backups:
            self.chains = Chains(self.num_nodes, self.backups, self.alive - self.outside)
        self.epoch = int(payload["epoch"])
        self.addresses = {int(r): a for r, a in payload["addresses"].items()}

    def change(self, epoch: int, alive, managers=None, leaving=(), addresses=None, outside=()) -> Chains | None:
        """pskv-server: membership epoch `epoch` with the live nodes `alive` (and the range managers, the
        nodes still leaving, without backups; new members' addresses; with backups the members outside
        the chains); returns the previous chains."""
        previous = self.chains
        if addresses:
            self.addresses = {**(self.addresses or {}), **{int(r): a for r, a in addresses.items()}}
        if managers is not None:
            self.managers = [int(m) for m in managers]
        self.leaving = frozenset(leaving)
        self.outside = frozenset(int(r) for r in outside)
        self.alive = frozenset(alive)
        if self.backups:
            self.chains = Chains(self.num_nodes, self.backups, self.alive - self.outside)
        self.epoch = epoch
        return previous

    def address(self, rank: int) -> str:
        return (self.addresses or {}).get(rank, "")

    def members(self) -> list[int]:
        """The ranks of the live nodes, in order (any thread: `alive` is replaced whole)."""
        return sorted(self.alive)

    # Read-only accessors for the parts that take a callable (net.endpoint, server.backups, client.context,
    # checkpoint): bound methods of the view, instead of closures over the node that holds it.
    def current_epoch(self) -> int:
        """The membership epoch now."""
        return self.epoch

    def current_cluster(self) -> int:
        """The cluster id (0 until welcomed)."""
        return self.cluster

    def current_chains(self) -> Chains | None:
        """With backups, who holds each key range now (None without)."""
        return self.chains

    def answers(self, header: Header) -> bool:
        """Whether a reply's sender may still answer this node: a member, or a node still leaving."""
        return header.sender in self.alive or header.sender in self.leaving

    @property
    def ranks(self) -> int:
        """The rank space: every rank that was ever a member is below it."""
        return max([self.num_nodes, *(r + 1 for r in (self.addresses or {}))])

    def key_ranges(self, rows: int) -> KeyRanges:
        """The manager ranges of a table of `rows` keys, as managed in this epoch (a sparse table's
        uint64 key space: SparseRanges)."""
        if rows == SPARSE_ROWS:
            return SparseRanges(self.num_nodes, self.managers, self.ranks)
        return KeyRanges(rows, self.num_nodes, self.managers, self.ranks)

    def admit(self, header: Header) -> Verdict:
        """Whether a message comes from this cluster: the dispatcher's gate."""
        if header.sender == COORDINATOR:
            if header.kind not in FROM_COORDINATOR:
                return Verdict.DROP
            if self.welcomed:
                if header.cluster != self.cluster:
                    return Verdict.DROP
                if header.epoch != self.coordinator_term:  # a coordinator that was taken over, or its successor
                    return Verdict.FENCED if header.epoch < self.coordinator_term else Verdict.HOLD
                return Verdict.ACCEPT
            return Verdict.ACCEPT if header.kind in _FIRST_WORDS else Verdict.DROP
        if header.kind in FROM_COORDINATOR:
            return Verdict.DROP
        if not self.welcomed:  # a peer was welcomed before us: replay it after our WELCOME
            return Verdict.HOLD if header.cluster else Verdict.DROP
        if header.cluster != self.cluster or header.sender < 0:
            return Verdict.DROP
        if header.epoch > self.epoch:  # its sender saw a membership change we have not seen yet: a node
            return Verdict.HOLD  # that joined may write before our MEMBERSHIP{joined} arrived
        if header.sender >= self.num_nodes and header.sender >= self.ranks:  # (ranks builds a list: only past
            return Verdict.DROP  # the ranks the cluster started with; the gate runs on every message)
        if header.sender not in self.alive and header.sender not in self.leaving:
            return Verdict.FENCED  # a node that died or was fenced off (see above)
        return Verdict.ACCEPT

    def __repr__(self) -> str:
        return (
            f"<View node={self.rank}/{self.num_nodes} cluster={self.cluster} epoch={self.epoch} "
            f"alive={sorted(self.alive)}{f' outside={sorted(self.outside)}' if self.outside else ''} "
            f"backups={self.backups}>"
        )
