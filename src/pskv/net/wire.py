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

from typing import NamedTuple

import numpy as np

from ..errors import ProtocolError
from .header import (  # (re-exported: the header's names are net.wire's)
    AGGREGATION,
    BACKUPS,
    BATCH,
    BF16,
    COORDINATOR,
    DTYPES,
    FORCE,
    FP16,
    FROM_COORDINATOR,
    FUSED,
    HEADER_SIZE,
    KEY_CODE,
    KEYS_CACHED,
    KEYS_REMEMBER,
    MAGIC,
    POSITIONS,
    READER,
    READERS,
    RELOCATION,
    REPLIES,
    REQUESTS,
    ROUNDS,
    ROWS,
    SET,
    STATE,
    VERSION,
    Header,
    Kind,
    control,
    control_payload,
    dtype_code,
    frame_bytes,
    lands,
    plain,
    plain_buffers,
    pull_header,
    rows_header,
    unpack_header,
)

__all__ = [  # the header's names (net.header), re-exported, and this module's
    "AGGREGATION",
    "BACKUPS",
    "BATCH",
    "BF16",
    "COORDINATOR",
    "DTYPES",
    "FORCE",
    "FP16",
    "FROM_COORDINATOR",
    "FUSED",
    "HEADER_SIZE",
    "KEY_CODE",
    "KEYS_CACHED",
    "KEYS_REMEMBER",
    "MAGIC",
    "POSITIONS",
    "READER",
    "READERS",
    "RELOCATION",
    "REPLIES",
    "REQUESTS",
    "ROUNDS",
    "ROWS",
    "SET",
    "STATE",
    "VERSION",
    "Header",
    "Kind",
    "dtype_code",
    "lands",
    "pull_header",
    "rows_header",
    "unpack_header",
    "control",
    "control_payload",
    "frame_bytes",
    "plain",
    "plain_buffers",
    "Payload",
    "unpack",
    "split",
    "one_write",
    "fused_halves",
    "encode",
]

_FUSED = frozenset({Kind.PUSH, Kind.PULL_REPLY})  # the kinds flag FUSED may mark
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
        kdt = DTYPES.get(header.key_dtype)
        if kdt is None or kdt.kind != "i":
            raise ProtocolError(f"{header!r} carries keys of dtype code {header.key_dtype}, not an integer")
        keys = _view(frames[i], kdt, (header.n_keys,), header)
        i += 1
    if has_pos:
        positions = _view(frames[i], np.dtype(np.int64), (header.n_keys,), header)
        i += 1
    if has_values:
        vdt = DTYPES.get(header.dtype)
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
