"""Wire format: message kinds, the fixed binary `Header` (`Header.pack()` / `unpack_header()`),
`encode()`, which turns a header and arrays into frames, and `unpack()`, its inverse, which turns
a message's frames into a `Payload` of numpy views.

A message is a ZeroMQ multipart message: frame 0 is a 44-byte header, the other frames are
raw buffers (keys, values) or, for control messages, one UTF-8 JSON object. Arrays travel as
zero-copy frames and are read back with np.frombuffer; nothing on the data path is pickled.

    data request   [header, keys, (positions), values]        PUSH, SET
                   [header, keys, (positions)]                PULL
                   [header, keys, values, pull]               PUSH with flag FUSED: a push and, after it, a
                   pull of the same table (Table.exchange); `pull` is int64: the pull's request id
                   and part, then its keys
    data reply     [header, (positions), values] PULL_REPLY, [header, (positions)] ACK,
                   [header, utf-8 message] ERROR
                   [header, (positions), values, acked]       PULL_REPLY with flag FUSED: the rows of a
                   fused pull, also answering its push whole; `acked` is int64 (request id, part, keys)
    relocation     [header, keys] LOCALIZE (`part`: the lease asked for, ms), HANDOVER, DECLINE
                   (`part`: the keys' owner, where they stay; `dim`: ms left of the shortest
                   lease that holds them there);
                   [header, keys, values, (state)] TRANSFER
    ranges         [header, (lo, hi - 1)] RANGE (a sparse table's written keys in the unsigned
                   interval [lo, hi)); [header, keys, values] RANGE_REPLY (sorted; counts as one part)
    leaving        [header, keys, values, (state)] HANDOFF (`part`: r + 1 when the receiver manages range r
                   from now on, 0 for rows returned to their manager); [header, keys] OWNERS (`part`:
                   the node that owns the keys); both answered by ACK
    replication    [header, keys, values] REPLICA_SYNC (answered by ACK)
    intents        [header, keys] INTENT (`part`: how many of the keys are starts, the rest ends), answered by
                   ACK whose positions are the starts that move to the sender (server.intents); with flag
                   ROWS (server.intents.GRANT), from a manager: copy these keys (no reply)
    backups        [header, keys, (positions), values] CHAIN: a write (flag SET: a set, else a push)
                   passed down a key range's chain of backups, keeping origin, id and part; the
                   chain's tail answers the origin with ACK.
                   [header, keys, values, (state), applied] SNAPSHOT: a range's whole state (flag
                   STATE: updater state follows; `part`: the range), `applied` the int64 (m, 3)
                   (origin, request id, part) writes it holds (at-most-once)
    aggregation    [header, keys, values, (rounds)] AGG_PUSH: one node's level-1 sums (sorted
                   distinct keys) of round `part`, or with flag ROUNDS of an int64 round per
                   key; answered by PULL_REPLY with the rows after the rounds were applied
    control        [header, json]                              coordinator traffic

`positions` (int64, flag POSITIONS) appear when a message covers only some keys of a request
part: a node that owns some keys of a request serves those and forwards the rest (Lapse), and
every reply names the positions in the part that it answers. `origin` is the node that made
the request; replies go to it directly, however often the request was forwarded: to its inbox,
or with `reply_to` set, to the reply box (a port on the origin's host) of the thread that waits
for them (see net.replybox.ReplyBox).

`unpack_header()` and `unpack()` check everything a peer could get wrong (length, magic, version,
kind, dtype codes, frame sizes) and raise ProtocolError; the server answers with ERROR or drops
the message.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import struct
from typing import NamedTuple

import numpy as np

from ..errors import ProtocolError

MAGIC = b"PSKV"
VERSION = 10  # 2: Header.reply_to; 3: Header.epoch; 4: SUBSCRIBE and the READER(S) flags (backups); 5: BATCH;
# 6: a batch's writes flag their positions; CHAIN and SNAPSHOT flag ROUNDS (aggregated BSP tables with backups);
# 7: HANDOFF, OWNERS (a node leaving without backups); 8: RANGE, RANGE_REPLY, a PUSH with flag ROWS (push_pull)
# 9: INTENT (client.intents, server.intents); 10: flag FUSED (a PUSH with a pull after it, Table.exchange)
COORDINATOR = -1  # the `sender`/destination rank of the coordinator


class Kind(enum.IntEnum):
    PULL = 1
    PULL_REPLY = 2
    PUSH = 3
    SET = 4
    ACK = 5
    ERROR = 6
    LOCALIZE = 7  # requester -> manager: make me the owner of these keys
    HANDOVER = 8  # manager -> old owner: send these keys to `origin`
    TRANSFER = 9  # old owner -> new owner: the rows (and updater state) of these keys
    DECLINE = 12  # manager -> requester: these keys stay where they are (another node's lease)
    REPLICA_SYNC = 10  # deltas of replicated keys, to every other node
    AGG_PUSH = 11  # node -> owner: a node's summed pushes of round `part` (NodeAggregate tables)
    CHAIN = 13  # a write passed down its key range's chain of backups (server.chain)
    SNAPSHOT = 14  # a key range's rows, updater state and applied writes, for a new backup
    SUBSCRIBE = 15  # localize with backups: make `origin` a reader (a kept-current copy) of these keys
    HANDOFF = 16  # a leaving node -> a member: take these rows (and state); `part` r + 1: and manage range r
    OWNERS = 17  # a leaving node -> the new manager of its range: `part` owns these keys
    RANGE = 18  # pull_range of a sparse table: the keys frame is (lo, hi - 1), the unsigned bounds
    RANGE_REPLY = 19  # every written key of the range, sorted, and its row
    # control traffic between nodes and the coordinator; payload is one JSON frame
    HELLO = 20
    WELCOME = 21
    HEARTBEAT = 22
    TICK = 23
    TABLE_DECL = 24
    TABLE_OK = 25
    BARRIER = 26
    BARRIER_RELEASE = 27
    BYE = 28
    SHUTDOWN_OK = 29
    NODE_FAILED = 30
    ABORT = 31
    CLOCK = 32  # node -> coordinator: every update stamped < clock is applied (SSP/BSP)
    GLOBAL_CLOCK = 33  # coordinator -> nodes: the minimum of the nodes' clocks
    STALLED = 34  # coordinator -> nodes: a collective some nodes never joined; the cluster stops
    MEMBERSHIP = 35  # coordinator -> nodes: a new membership epoch (a node died; backups take over)
    SYNCED = 36  # node -> coordinator: every range this node backs up in `epoch` is filled again
    MOVED = 37  # node -> nodes: the coordinator's node went silent; this node runs it now (membership.takeover)
    REJOIN = 38  # node -> a coordinator that took over: what this node knows and waits for
    LEAVE = 39  # node -> coordinator: take me out for good (node.leave, backups); a MEMBERSHIP without it says yes
    LEFT = 40  # coordinator -> node: the LEAVE was refused, and why; without backups: go (hand over), or done
    DRAINED = 41  # node -> coordinator: every request it made before membership epoch `epoch` is answered
    JOINED = 42  # coordinator -> a node that joins a running cluster (HELLO{join}): its rank and the cluster as it is
    INTENT = 43  # node -> manager: keys its workers' intent windows start (`part` of them) and end (server.intents)


_KINDS = {int(k): k for k in Kind}
REQUESTS = frozenset({Kind.PULL, Kind.PUSH, Kind.SET})
REPLIES = frozenset({Kind.PULL_REPLY, Kind.ACK, Kind.ERROR, Kind.RANGE_REPLY})
RELOCATION = frozenset(
    {Kind.LOCALIZE, Kind.HANDOVER, Kind.TRANSFER, Kind.DECLINE, Kind.REPLICA_SYNC, Kind.HANDOFF, Kind.OWNERS}
)
POSITIONS = 1  # flag: a positions frame follows the keys (requests) or the header (replies)
FORCE = 1  # flag of a LOCALIZE: move the keys even under another node's lease (a joining node takes its
# share); relocation messages never carry positions, so it shares their bit
STATE = 2  # flag: a TRANSFER carries updater state after the values
ROUNDS = 4  # flag: an AGG_PUSH (or a SNAPSHOT) carries an int64 round per key after the values (state); a CHAIN
# write with it completes a round of its keys (server.rounds), and carries no such frame
SET = 8  # flag: a CHAIN message carries a set (else a push)
READER = 16  # flag: a CHAIN or SNAPSHOT for a reader's copy (server.readers); a SUBSCRIBE passed down a chain
READERS = 32  # flag: a SNAPSHOT carries each key's reader, (n,) int64, after the applied writes
ROWS = 64  # flag: a PUSH (and its CHAIN hops) whose writer wants the rows after it (Table.push_pull): answered
# by PULL_REPLY (with backups, by the chain's tail)
BATCH = 128  # flag: a CHAIN or ACK carrying several writes, described by a (m, 5) int64 frame last (see `split`)
FUSED = 2  # flag of a PUSH: a pull of the same table follows it in the message (its `pull` frame; net.endpoint's
# `gather`, server.exchange); of a PULL_REPLY: it also answers that push whole (its `acked` frame). (STATE's bit:
# neither kind carries state)
AGGREGATION = frozenset({Kind.AGG_PUSH})  # handled by Server, served by server.aggregate.Owner
_FUSED = frozenset({Kind.PUSH, Kind.PULL_REPLY})  # the kinds flag FUSED may mark
FROM_COORDINATOR = frozenset(
    {
        Kind.WELCOME,
        Kind.TICK,
        Kind.TABLE_OK,
        Kind.BARRIER_RELEASE,
        Kind.SHUTDOWN_OK,
        Kind.NODE_FAILED,
        Kind.ABORT,
        Kind.GLOBAL_CLOCK,
        Kind.STALLED,
        Kind.MEMBERSHIP,
        Kind.LEFT,
        Kind.JOINED,
    }
)
BACKUPS = frozenset({Kind.CHAIN, Kind.SNAPSHOT, Kind.SUBSCRIBE})
_BATCHED = frozenset({Kind.CHAIN, Kind.ACK})  # the kinds a BATCH may be
_WITH_KEYS = REQUESTS | RELOCATION | AGGREGATION | BACKUPS | {Kind.RANGE, Kind.RANGE_REPLY, Kind.INTENT}
_WITH_VALUES = frozenset(
    {
        Kind.PUSH,
        Kind.SET,
        Kind.PULL_REPLY,
        Kind.RANGE_REPLY,
        Kind.TRANSFER,
        Kind.REPLICA_SYNC,
        Kind.AGG_PUSH,
        Kind.HANDOFF,
        Kind.CHAIN,
        Kind.SNAPSHOT,
    }
)

_DTYPES = {0: None, 1: np.dtype(np.float32), 2: np.dtype(np.float64), 3: np.dtype(np.int64), 4: np.dtype(np.int32)}
_CODES = {dt: code for code, dt in _DTYPES.items() if dt is not None}
# codes only a request encoded by net.codec carries (decoded by the receiver before `unpack`): values
# as float16 / bfloat16 bits; keys to remember, or the 8-byte hash of a remembered list; the high
# nibble of either byte names a compression (1 zstd, 2 lz4)
FP16, BF16, KEYS_REMEMBER, KEYS_CACHED = 5, 6, 7, 8
_VALUE_CODES = frozenset(_DTYPES) | {FP16, BF16}
_KEY_CODES = frozenset(_DTYPES) | {KEYS_REMEMBER, KEYS_CACHED}


def _valid_code(code: int, low: frozenset) -> bool:
    return code & 0x0F in low and code >> 4 in (0, 1, 2)


# magic, version, kind, flags, cluster, sender, table, request_id, part, n_keys, dim, dtype, key dtype, origin,
# reply_to, epoch
KEY_CODE = 3  # keys travel as int64 (dtype_code(np.int64))
_STRUCT = struct.Struct("<4sBBHIhHQIIIBBhHH")
HEADER_SIZE = _STRUCT.size  # 44 bytes


def dtype_code(dtype) -> int:
    try:
        return _CODES[np.dtype(dtype)]
    except KeyError:
        raise ProtocolError(f"dtype {np.dtype(dtype)} cannot travel on the wire; use float32 or float64") from None


@dataclasses.dataclass(slots=True)
class Header:
    kind: Kind
    cluster: int = 0
    sender: int = 0  # rank of the node that sent it; COORDINATOR for the coordinator
    table: int = 0
    request_id: int = 0
    part: int = 0  # which part of a partitioned request this message answers
    n_keys: int = 0
    dim: int = 0
    dtype: int = 0  # code of the values' dtype (0: no values)
    key_dtype: int = 0  # code of the keys' dtype (0: no keys)
    flags: int = 0
    origin: int = 0  # the node that made the request; replies go there (forwarding keeps it)
    reply_to: int = 0  # the port of the origin's reply box for this request's replies; 0: its inbox
    epoch: int = 0  # the sender's membership epoch (stamped by the endpoint; membership.view admits by it)

    def pack(self) -> bytes:
        return _STRUCT.pack(
            MAGIC,
            VERSION,
            self.kind,
            self.flags,
            self.cluster,
            self.sender,
            self.table,
            self.request_id,
            self.part,
            self.n_keys,
            self.dim,
            self.dtype,
            self.key_dtype,
            self.origin,
            self.reply_to,
            self.epoch & 0xFFFF,
        )

    def __repr__(self) -> str:
        who = "coord" if self.sender == COORDINATOR else f"n{self.sender}"
        return (
            f"<{self.kind.name.title()} req={self.request_id}.{self.part} table={self.table} "
            f"from={who} keys={self.n_keys} dim={self.dim}>"
        )


def unpack_header(frame: bytes | memoryview) -> Header:
    """Frame 0 -> Header. Raises ProtocolError for anything that is not a pskv header."""
    if len(frame) != HEADER_SIZE:
        raise ProtocolError(f"header is {len(frame)} bytes, expected {HEADER_SIZE}; not a pskv message")
    (
        magic,
        version,
        kind,
        flags,
        cluster,
        sender,
        table,
        rid,
        part,
        n_keys,
        dim,
        dtype,
        key_dtype,
        origin,
        reply_to,
        epoch,
    ) = _STRUCT.unpack(frame)
    if magic != MAGIC:
        raise ProtocolError(f"bad magic {magic!r}; not a pskv message")
    if version != VERSION:
        raise ProtocolError(f"protocol version {version}, this node speaks {VERSION}; run one pskv version everywhere")
    code, kind = kind, _KINDS.get(kind)  # (a dict, not Kind(kind): the enum call costs more than the rest)
    if kind is None:
        raise ProtocolError(f"unknown message kind {code}")
    if not _valid_code(dtype, _VALUE_CODES) or not _valid_code(key_dtype, _KEY_CODES):
        raise ProtocolError(f"unknown dtype code {dtype}/{key_dtype} in {kind.name}")
    return Header(
        kind, cluster, sender, table, rid, part, n_keys, dim, dtype, key_dtype, flags, origin, reply_to, epoch
    )


_PULL, _PULL_REPLY = int(Kind.PULL), int(Kind.PULL_REPLY)


def pull_header(cluster: int, sender: int, table: int, rid: int, n: int, dim: int, reply_to: int, epoch: int) -> bytes:
    """Frame 0 of a plain PULL of `n` int64 keys, part 0, from `sender` for itself: what
    `encode(Header(Kind.PULL, ...), keys=keys).pack()` makes, without the Header (a request's fast path)."""
    return _STRUCT.pack(
        MAGIC, VERSION, _PULL, 0, cluster, sender, table, rid, 0, n, dim, 0, KEY_CODE, sender, reply_to, epoch & 0xFFFF
    )


def rows_header(cluster: int, sender: int, to: Header, n: int, dim: int, code: int, epoch: int) -> bytes:
    """Frame 0 of a PULL_REPLY of `n` rows (dim `dim`, dtype code `code`) that answers request part `to`
    whole: what `encode(reply_header(to, Kind.PULL_REPLY, n), values=rows)` makes, without the Header."""
    return _STRUCT.pack(
        MAGIC,
        VERSION,
        _PULL_REPLY,
        0,
        cluster,
        sender,
        to.table,
        to.request_id,
        to.part,
        n,
        dim,
        code,
        0,
        to.origin,
        0,
        epoch & 0xFFFF,
    )


def lands(frame, rid: int, out, dim: int, code: int) -> bool:
    """Whether header `frame` (HEADER_SIZE bytes) is a plain PULL_REPLY to part 0 of request `rid` with
    len(out) rows of `dim` values of dtype `code`, nothing but the values after it (net.replybox's landing)."""
    magic, version, kind, flags, _, _, _, r, part, n, d, dtype, _, _, _, _ = _STRUCT.unpack(frame)
    return (
        r == rid
        and kind == _PULL_REPLY
        and not flags
        and not part
        and n == len(out)
        and d == dim
        and dtype == code
        and magic == MAGIC
        and version == VERSION
    )


class Payload(NamedTuple):
    keys: np.ndarray | None  # (n,) int, read-only view
    positions: np.ndarray | None  # (n,) int64 positions within the request part, or None: all, in order
    values: np.ndarray | None  # (n, dim), read-only view
    state: np.ndarray | None  # (n, width) updater state of a TRANSFER
    rounds: np.ndarray | None = None  # (n,) int64 round of each key of an AGG_PUSH (SNAPSHOT) with flag ROUNDS
    applied: np.ndarray | None = None  # (m, 3) int64 (origin, request id, part) of a SNAPSHOT
    readers: np.ndarray | None = None  # (n,) int64 reader of each key of a SNAPSHOT with flag READERS
    writes: np.ndarray | None = None  # (m, 5) int64 (origin, request id, part, keys, flags) of a BATCH
    fused: np.ndarray | None = None  # int64 of flag FUSED: a PUSH's (pull request id, part, keys...), a
    # PULL_REPLY's (push request id, part, keys)


def unpack(header: Header, frames: list, state_width: int = 0) -> Payload:
    """The arrays of a data message as read-only views of its frames (no copy).

    Checks the frame count and each frame's byte length against the header."""
    kind = header.kind
    has_keys = kind in _WITH_KEYS
    has_pos = bool(header.flags & POSITIONS) and kind not in RELOCATION
    has_values = kind in _WITH_VALUES
    has_state = bool(header.flags & STATE) and kind in (Kind.TRANSFER, Kind.SNAPSHOT, Kind.HANDOFF)
    has_rounds = bool(header.flags & ROUNDS) and kind in (Kind.AGG_PUSH, Kind.SNAPSHOT)
    has_applied = kind == Kind.SNAPSHOT
    has_readers = has_applied and bool(header.flags & READERS)
    has_writes = bool(header.flags & BATCH) and kind in _BATCHED
    has_fused = bool(header.flags & FUSED) and kind in _FUSED
    expected = (
        1
        + has_keys
        + has_pos
        + has_values
        + has_state
        + has_rounds
        + has_applied
        + has_readers
        + has_writes
        + has_fused
    )
    if len(frames) != expected:
        raise ProtocolError(f"{header!r} has {len(frames)} frames, expected {expected}")
    keys = positions = values = state = None
    i = 1
    if has_keys:
        kdt = _DTYPES.get(header.key_dtype)
        if kdt is None or kdt.kind != "i":
            raise ProtocolError(f"{header!r} carries keys of dtype code {header.key_dtype}, not an integer")
        keys = _view(frames[i], kdt, (header.n_keys,), header)
        i += 1
    if has_pos:
        positions = _view(frames[i], np.dtype(np.int64), (header.n_keys,), header)
        i += 1
    if has_values:
        vdt = _DTYPES.get(header.dtype)
        if vdt is None or vdt.kind != "f":
            raise ProtocolError(f"{header!r} carries values of dtype code {header.dtype}, not a float")
        values = _view(frames[i], vdt, (header.n_keys, header.dim), header)
        i += 1
    if has_state:
        assert values is not None  # (the kinds with state carry values)
        state = _view(frames[i], values.dtype, (header.n_keys, state_width), header)
        i += 1
    rounds = None
    if has_rounds:
        rounds = _view(frames[i], np.dtype(np.int64), (header.n_keys,), header)
        i += 1
    if has_applied:
        buf = frames[i].buffer if hasattr(frames[i], "buffer") else memoryview(frames[i])
        rows = buf.nbytes // 24
        applied = _view(frames[i], np.dtype(np.int64), (rows, 3), header)
        readers = _view(frames[i + 1], np.dtype(np.int64), (header.n_keys,), header) if has_readers else None
        return Payload(keys, positions, values, state, rounds, applied, readers)
    if has_rounds:
        return Payload(keys, positions, values, state, rounds)
    if has_writes:
        buf = frames[i].buffer if hasattr(frames[i], "buffer") else memoryview(frames[i])
        writes = _view(frames[i], np.dtype(np.int64), (buf.nbytes // 40, 5), header)
        return Payload(keys, positions, values, state, writes=writes)
    if has_fused:
        buf = frames[i].buffer if hasattr(frames[i], "buffer") else memoryview(frames[i])
        fused = _view(frames[i], np.dtype(np.int64), (buf.nbytes // 8,), header)
        if len(fused) != 3 if kind == Kind.PULL_REPLY else len(fused) < 2:
            raise ProtocolError(
                f"{header!r}: a fused frame of {len(fused)} int64, expected "
                f"{'3' if kind == Kind.PULL_REPLY else 'at least 2'}"
            )
        return Payload(keys, positions, values, state, fused=fused)
    return Payload(keys, positions, values, state)


def plain(header: Header) -> bool:
    """A PULL, PUSH or SET as a Table sends it without a codec: int64 keys, float values, no flag but
    POSITIONS (forward hops in bits 8.. are fine). What the server serves a run of in one step."""
    return (
        header.kind in REQUESTS
        and header.key_dtype == KEY_CODE
        and header.dtype in _PLAIN_VALUES
        and not header.flags & _NOT_PLAIN
    )


_PLAIN_VALUES = frozenset({0, 1, 2})  # none, float32, float64
_NOT_PLAIN = 0xFF & ~POSITIONS  # ROWS (push_pull) and every other flag bit of the low byte


def plain_buffers(header: Header, frames: list, row_bytes: int) -> tuple:
    """(keys, positions or None, values or None) of a `plain` request as memoryviews of its frames
    (no copy, no array made), each length checked against the header (`row_bytes`: one row of the
    table's values). Raises ProtocolError as `unpack` would."""
    want = 3 if header.kind != Kind.PULL else 2
    has_pos = header.flags & POSITIONS
    if len(frames) != want + bool(has_pos):
        raise ProtocolError(f"{header!r} has {len(frames)} frames, expected {want + bool(has_pos)}")
    n = header.n_keys
    bufs = [f.buffer if hasattr(f, "buffer") else memoryview(f) for f in frames[1:]]
    keys = bufs[0]
    positions = bufs[1] if has_pos else None
    values = bufs[-1] if want == 3 else None
    if (
        keys.nbytes != 8 * n
        or (positions is not None and positions.nbytes != 8 * n)
        or (values is not None and values.nbytes != n * row_bytes)
    ):
        raise ProtocolError(
            f"{header!r}: frames of {[b.nbytes for b in bufs]} bytes do not fit {n} keys of {row_bytes} bytes a row"
        )
    return keys, positions, values


def split(header: Header, p: Payload):
    """The writes of a BATCH message, one (Header, Payload) each, as if each had come alone (views,
    no copy): a write gets its positions only if its flags have POSITIONS (the others cover their
    whole part). Raises ProtocolError when the counts do not add up."""
    w = p.writes
    if w is None or p.positions is None or (p.keys is not None and len(p.keys) != len(p.positions)):
        raise ProtocolError(f"{header!r}: a batch without its writes or positions")
    counts = w[:, 3]
    if len(counts) and (counts.min() < 0 or int(counts.sum()) != len(p.positions)):
        raise ProtocolError(f"{header!r}: its writes name {int(counts.sum())} keys, it carries {len(p.positions)}")
    start = 0
    for origin, rid, part, n, flags in w.tolist():
        stop = start + n
        yield (
            one_write(header, origin, rid, part, n, flags),
            Payload(
                None if p.keys is None else p.keys[start:stop],
                p.positions[start:stop] if flags & POSITIONS else None,
                None if p.values is None else p.values[start:stop],
                None,
            ),
        )
        start = stop


def one_write(batch: Header, origin: int, rid: int, part: int, n: int, flags: int) -> Header:
    """The header of write (origin, rid, part) of `n` keys of a BATCH, as if it had come alone."""
    return Header(
        batch.kind,
        batch.cluster,
        batch.sender,
        batch.table,
        rid,
        part,
        n,
        batch.dim,
        batch.dtype,
        batch.key_dtype,
        flags & ~POSITIONS,
        origin,
        0,
        batch.epoch,
    )


def fused_halves(header: Header, p: Payload) -> tuple[Header, Header, np.ndarray]:
    """The push and the pull a PUSH with flag FUSED carries (`p.fused` set), each as if it had come
    alone: (the push's header, the pull's header, the pull's (m,) int64 keys)."""
    fused = p.fused
    assert fused is not None  # (the caller's condition)
    flags = header.flags & ~FUSED
    pulls = fused[2:]
    push = Header(
        header.kind,
        header.cluster,
        header.sender,
        header.table,
        header.request_id,
        header.part,
        header.n_keys,
        header.dim,
        header.dtype,
        header.key_dtype,
        flags,
        header.origin,
        header.reply_to,
        header.epoch,
    )
    pull = Header(
        Kind.PULL,
        header.cluster,
        header.sender,
        header.table,
        int(fused[0]),
        int(fused[1]),
        len(pulls),
        header.dim,
        0,
        KEY_CODE,
        flags,
        header.origin,
        header.reply_to,
        header.epoch,
    )
    return push, pull, pulls


def encode(
    header: Header,
    keys=None,
    positions=None,
    values=None,
    state=None,
    rounds=None,
    applied=None,
    readers=None,
    writes=None,
    fused=None,
) -> list:
    """The frames of a data message (the inverse of `unpack`): the header, packed last, gets its
    key count, dtypes and flags from the arrays it carries. Arrays travel as they are (contiguous)."""
    frames: list = [None]
    if keys is not None:
        header.n_keys, header.key_dtype = len(keys), KEY_CODE
        frames.append(np.ascontiguousarray(keys, np.int64))
    if positions is not None:
        header.n_keys = len(positions)
        header.flags |= POSITIONS
        frames.append(np.ascontiguousarray(positions, np.int64))
    if values is not None:
        header.n_keys, header.dim, header.dtype = len(values), values.shape[1], dtype_code(values.dtype)
        frames.append(np.ascontiguousarray(values))
    if state is not None:
        header.flags |= STATE
        frames.append(np.ascontiguousarray(state))
    if rounds is not None:
        header.flags |= ROUNDS
        frames.append(np.ascontiguousarray(rounds, np.int64))
    if applied is not None:
        frames.append(np.ascontiguousarray(applied, np.int64).reshape(-1, 3))
    if readers is not None:
        header.flags |= READERS
        frames.append(np.ascontiguousarray(readers, np.int64))
    if writes is not None:
        header.flags |= BATCH
        frames.append(np.ascontiguousarray(writes, np.int64).reshape(-1, 5))
    if fused is not None:
        header.flags |= FUSED
        frames.append(np.ascontiguousarray(fused, np.int64))
    frames[0] = header.pack()
    return frames


def _view(frame, dtype: np.dtype, shape: tuple, header: Header) -> np.ndarray:
    buf = frame.buffer if hasattr(frame, "buffer") else memoryview(frame)
    expected = dtype.itemsize
    for extent in shape:  # (not np.prod: a measurable share of a small message's cost)
        expected *= extent
    if buf.nbytes != expected:
        raise ProtocolError(f"{header!r}: frame of {buf.nbytes} bytes, expected {expected} for {shape} {dtype}")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def frame_bytes(frame) -> bytes:
    return frame.bytes if hasattr(frame, "bytes") else bytes(frame)


def control(kind: Kind, cluster: int, sender: int, payload: dict | None = None, epoch: int = 0) -> list[bytes]:
    """Frames of a control message with a JSON payload (a coordinator stamps its term in `epoch`)."""
    body = json.dumps(payload or {}, separators=(",", ":")).encode()
    return [Header(kind, cluster=cluster, sender=sender, epoch=epoch).pack(), body]


def control_payload(header: Header, frames: list) -> dict:
    if len(frames) != 2:
        raise ProtocolError(f"{header!r} has {len(frames)} frames, expected 2")
    try:
        payload = json.loads(frame_bytes(frames[1]))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"{header!r}: payload is not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise ProtocolError(f"{header!r}: payload is {type(payload).__name__}, expected an object")
    return payload
