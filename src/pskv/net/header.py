"""The fixed binary header of every pskv message (frame 0): message kinds, flags, dtype codes,
`Header` with `pack()` and `unpack_header()`, the headers a request's short path packs at once
(`pull_header`, `rows_header`) or checks (`lands`: net.replybox's landing), and what its header
alone says of a message: a plain request (`plain`, `plain_buffers`: what the server serves a run
of in one step), a control message (a header and one JSON object: `control`, `control_payload`).
net.wire, which turns headers and arrays into frames and back, re-exports all of it: import from
net.wire.

Every field is little-endian; `unpack_header()` checks what a peer could get wrong (length, magic,
version, kind, dtype codes) and raises ProtocolError. The header is 44 bytes (HEADER_SIZE).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import struct

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

DTYPES = {0: None, 1: np.dtype(np.float32), 2: np.dtype(np.float64), 3: np.dtype(np.int64), 4: np.dtype(np.int32)}
_CODES = {dt: code for code, dt in DTYPES.items() if dt is not None}
# codes only a request encoded by net.codec carries (decoded by the receiver before `unpack`): values
# as float16 / bfloat16 bits; keys to remember, or the 8-byte hash of a remembered list; the high
# nibble of either byte names a compression (1 zstd, 2 lz4)
FP16, BF16, KEYS_REMEMBER, KEYS_CACHED = 5, 6, 7, 8
_VALUE_CODES = frozenset(DTYPES) | {FP16, BF16}
_KEY_CODES = frozenset(DTYPES) | {KEYS_REMEMBER, KEYS_CACHED}


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
