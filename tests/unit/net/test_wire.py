"""protocol.py: the 44-byte Header, data frames read as zero-copy views, control messages as JSON."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pskv.errors import ProtocolError
from pskv.net.wire import (COORDINATOR, HEADER_SIZE, MAGIC, REQUESTS, VERSION, Header, Kind, control,
                           control_payload, dtype_code, encode, unpack, unpack_header)

pytestmark = pytest.mark.timeout(60)

# byte offsets of single-byte fields in the packed header: "<4s B B H I h H Q I I I B B H"
VERSION_AT = struct.calcsize("<4s")
KIND_AT = struct.calcsize("<4sB")
DTYPE_AT = struct.calcsize("<4sBBHIhHQIII")
KEY_DTYPE_AT = DTYPE_AT + 1

F32, F64, I64, I32 = (dtype_code(np.float32), dtype_code(np.float64), dtype_code(np.int64), dtype_code(np.int32))


def data_arrays(h, frames):
    p = unpack(h, frames)
    return p.keys, p.values


def patched(header: Header, offset: int, value: bytes) -> bytes:
    """header.pack() with the bytes at `offset` replaced by `value`."""
    raw = bytearray(header.pack())
    raw[offset:offset + len(value)] = value
    return bytes(raw)


def push_message(n: int = 3, dim: int = 2, key_dtype=np.int64, dtype=np.float32, kind: Kind = Kind.PUSH):
    """(header, frames) of a well-formed data request carrying keys 0..n-1 and values 0..n*dim-1."""
    keys = np.arange(n, dtype=key_dtype)
    values = np.arange(n * dim, dtype=dtype).reshape(n, dim)
    h = Header(kind, cluster=7, sender=1, table=2, request_id=9, part=0, n_keys=n, dim=dim,
               dtype=dtype_code(dtype) if kind != Kind.PULL else 0, key_dtype=dtype_code(key_dtype))
    frames = [h.pack(), keys.tobytes()]
    if kind != Kind.PULL:
        frames.append(values.tobytes())
    return h, frames


# ---- Header ---------------------------------------------------------------------------------------


def test_header_size_is_44_bytes():
    """A packed header is HEADER_SIZE == 44 bytes and starts with the magic."""
    packed = Header(Kind.ACK).pack()
    assert HEADER_SIZE == 44 and len(packed) == HEADER_SIZE
    assert packed[:4] == MAGIC and packed[VERSION_AT] == VERSION


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from(list(Kind)), cluster=st.integers(0, 2**32 - 1), sender=st.integers(-1, 2**15 - 1),
       table=st.integers(0, 2**16 - 1), request_id=st.integers(0, 2**64 - 1), part=st.integers(0, 2**32 - 1),
       n_keys=st.integers(0, 2**32 - 1), dim=st.integers(0, 2**32 - 1), dtype=st.sampled_from([0, 1, 2, 3, 4]),
       key_dtype=st.sampled_from([0, 1, 2, 3, 4]), flags=st.integers(0, 2**16 - 1),
       origin=st.integers(-1, 2**15 - 1), reply_to=st.integers(0, 2**16 - 1))
def test_header_pack_unpack_round_trip(kind, cluster, sender, table, request_id, part, n_keys, dim, dtype,
                                       key_dtype, flags, origin, reply_to):
    """unpack_header(h.pack()) == h for every field value the struct can hold."""
    h = Header(kind, cluster, sender, table, request_id, part, n_keys, dim, dtype, key_dtype, flags, origin, reply_to)
    assert unpack_header(h.pack()) == h
    assert unpack_header(memoryview(h.pack())) == h


def test_header_repr_names_kind_request_sender_and_sizes():
    """repr is one line with kind, request id.part, table, sender and key count."""
    h = Header(Kind.PUSH, sender=3, table=5, request_id=17, part=2, n_keys=4096, dim=8)
    assert repr(h) == "<Push req=17.2 table=5 from=n3 keys=4096 dim=8>"
    assert "from=coord" in repr(Header(Kind.WELCOME, sender=COORDINATOR))


@pytest.mark.parametrize("size", [0, 1, HEADER_SIZE - 1, HEADER_SIZE + 1, 1000])
def test_unpack_header_wrong_length_raises(size):
    """A frame 0 that is not exactly 44 bytes is a ProtocolError that states both lengths."""
    with pytest.raises(ProtocolError, match=f"header is {size} bytes, expected {HEADER_SIZE}"):
        unpack_header(b"P" * size)


def test_unpack_header_bad_magic_raises():
    """A 40-byte frame with another magic is rejected as not a pskv message."""
    with pytest.raises(ProtocolError, match="bad magic b'XXXX'"):
        unpack_header(patched(Header(Kind.ACK), 0, b"XXXX"))


@pytest.mark.parametrize("version", [0, VERSION + 1, 255])
def test_unpack_header_wrong_version_raises(version):
    """Another protocol version is rejected with both version numbers in the message."""
    with pytest.raises(ProtocolError, match=f"protocol version {version}, this node speaks {VERSION}"):
        unpack_header(patched(Header(Kind.ACK), VERSION_AT, bytes([version])))


@pytest.mark.parametrize("kind", [0, 44, 50, 99, 255])  # kinds no Kind names (43: INTENT)
def test_unpack_header_unknown_kind_raises(kind):
    """A kind byte that names no Kind is rejected with its value."""
    with pytest.raises(ProtocolError, match=f"unknown message kind {kind}"):
        unpack_header(patched(Header(Kind.ACK), KIND_AT, bytes([kind])))


@pytest.mark.parametrize("offset", [DTYPE_AT, KEY_DTYPE_AT])
@pytest.mark.parametrize("code", [9, 99, 255])  # (5..8 and a compression nibble: net.codec's codes)
def test_unpack_header_unknown_dtype_code_raises(offset, code):
    """An unknown values or keys dtype code is rejected."""
    with pytest.raises(ProtocolError, match="unknown dtype code"):
        unpack_header(patched(Header(Kind.PUSH), offset, bytes([code])))


def test_dtype_code_unsupported_dtype_raises():
    """Only float32/float64 values and int32/int64 keys travel; others are a ProtocolError."""
    assert {F32, F64, I64, I32} == {1, 2, 3, 4}
    with pytest.raises(ProtocolError, match="float16 cannot travel"):
        dtype_code(np.float16)


# ---- data frames ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_data_arrays_push_returns_keys_and_values(key_dtype, dtype):
    """A PUSH gives back its keys (n,) and values (n, dim) with the dtypes the header names."""
    h, frames = push_message(n=3, dim=2, key_dtype=key_dtype, dtype=dtype)
    keys, values = data_arrays(h, frames)
    assert keys.dtype == key_dtype and keys.tolist() == [0, 1, 2]
    assert values.dtype == dtype and values.shape == (3, 2) and values.ravel().tolist() == [0, 1, 2, 3, 4, 5]


def test_data_arrays_pull_has_keys_only():
    """A PULL carries keys and no values."""
    h, frames = push_message(kind=Kind.PULL)
    keys, values = data_arrays(h, frames)
    assert keys.tolist() == [0, 1, 2] and values is None


def test_data_arrays_pull_reply_has_values_only():
    """A PULL_REPLY carries values (n, dim) and no keys; an ACK carries nothing."""
    vals = np.ones((4, 3), np.float64)
    h = Header(Kind.PULL_REPLY, n_keys=4, dim=3, dtype=F64)
    keys, values = data_arrays(h, [h.pack(), vals.tobytes()])
    assert keys is None and values.shape == (4, 3)
    ack = Header(Kind.ACK)
    assert data_arrays(ack, [ack.pack()]) == (None, None)


def test_data_arrays_empty_request_is_valid():
    """n_keys == 0 with empty frames decodes to empty arrays of the right shape."""
    h = Header(Kind.PUSH, n_keys=0, dim=5, dtype=F32, key_dtype=I64)
    keys, values = data_arrays(h, [h.pack(), b"", b""])
    assert keys.shape == (0,) and values.shape == (0, 5)


def test_data_arrays_returns_zero_copy_views():
    """Keys and values are views of the frames' buffers, not copies; read-only over bytes frames."""
    h, frames = push_message(n=3, dim=2)
    buffers = [bytearray(frames[1]), bytearray(frames[2])]
    keys, values = data_arrays(h, [frames[0], *buffers])
    assert np.shares_memory(keys, np.frombuffer(buffers[0], np.uint8))
    assert np.shares_memory(values, np.frombuffer(buffers[1], np.uint8))
    buffers[1][:4] = np.float32(42.0).tobytes()
    assert values[0, 0] == 42.0  # the view sees the change in the frame
    keys_ro, values_ro = data_arrays(h, frames)
    assert not keys_ro.flags.writeable and not values_ro.flags.writeable


@pytest.mark.parametrize("count", [1, 2, 4])
def test_data_arrays_wrong_frame_count_raises(count):
    """A PUSH needs exactly 3 frames (header, keys, values)."""
    h, frames = push_message()
    frames = (frames + [b"", b""])[:count]
    with pytest.raises(ProtocolError, match=f"has {count} frames, expected 3"):
        data_arrays(h, frames)


@pytest.mark.parametrize("cut", [1, 8, 23])
def test_data_arrays_truncated_keys_raises(cut):
    """A keys frame shorter than n_keys * itemsize is a ProtocolError naming both sizes."""
    h, frames = push_message(n=3)
    frames[1] = frames[1][:-cut]
    with pytest.raises(ProtocolError, match=f"frame of {24 - cut} bytes, expected 24"):
        data_arrays(h, frames)


@pytest.mark.parametrize("cut", [1, 4, 24])
def test_data_arrays_truncated_values_raises(cut):
    """A values frame shorter than n_keys * dim * itemsize is a ProtocolError naming both sizes."""
    h, frames = push_message(n=3, dim=2)
    frames[2] = frames[2][:-cut]
    with pytest.raises(ProtocolError, match=f"frame of {24 - cut} bytes, expected 24"):
        data_arrays(h, frames)


def test_data_arrays_oversized_values_raises():
    """Extra bytes after the values are rejected too, not ignored."""
    h, frames = push_message(n=3, dim=2)
    frames[2] = frames[2] + b"\0" * 4
    with pytest.raises(ProtocolError, match="expected 24"):
        data_arrays(h, frames)


def test_data_arrays_float_keys_raises():
    """Keys must be integers: a key dtype code of a float type is rejected."""
    h, frames = push_message()
    h.key_dtype = F64
    with pytest.raises(ProtocolError, match="not an integer"):
        data_arrays(h, frames)


@pytest.mark.parametrize("code", [0, I64])
def test_data_arrays_non_float_values_raises(code):
    """Values must be floats: no dtype (0) or an integer code is rejected."""
    h, frames = push_message()
    h.dtype = code
    with pytest.raises(ProtocolError, match="not a float"):
        data_arrays(h, frames)


def test_data_arrays_huge_n_keys_raises():
    """A header claiming 2**32-1 keys with small frames is a ProtocolError, not a MemoryError."""
    h, frames = push_message()
    h.n_keys = 2**32 - 1
    with pytest.raises(ProtocolError):
        data_arrays(h, frames)


def test_requests_and_replies_sets():
    """PULL, PUSH and SET are the requests a server answers."""
    assert REQUESTS == {Kind.PULL, Kind.PUSH, Kind.SET}


# ---- control messages -----------------------------------------------------------------------------


def test_control_payload_round_trip():
    """control() builds [header, json] and control_payload() gives the same dict back."""
    payload = {"rank": 3, "address": "127.0.0.1:5100", "nested": {"a": [1, 2.5, None]}, "text": "é"}
    frames = control(Kind.HELLO, 77, 3, payload)
    h = unpack_header(frames[0])
    assert (h.kind, h.cluster, h.sender) == (Kind.HELLO, 77, 3)
    assert control_payload(h, frames) == payload
    empty = control(Kind.BYE, 1, 0)
    assert control_payload(unpack_header(empty[0]), empty) == {}


@pytest.mark.parametrize("body", [b"\xff\xfe not utf-8", b"{not json", b"", b"{\"a\": 1"])
def test_control_payload_not_json_raises(body):
    """A payload that is not UTF-8 JSON is a ProtocolError."""
    h = Header(Kind.BARRIER)
    with pytest.raises(ProtocolError, match="payload is not JSON"):
        control_payload(h, [h.pack(), body])


@pytest.mark.parametrize("value", [[1, 2], 3, "text", None])
def test_control_payload_not_an_object_raises(value):
    """A JSON payload must be an object (dict)."""
    h = Header(Kind.BARRIER)
    with pytest.raises(ProtocolError, match="expected an object"):
        control_payload(h, [h.pack(), json.dumps(value).encode()])


@pytest.mark.parametrize("count", [1, 3])
def test_control_payload_wrong_frame_count_raises(count):
    """A control message has exactly two frames."""
    frames = control(Kind.TICK, 1, -1) + [b"{}"]
    with pytest.raises(ProtocolError, match=f"has {count} frames, expected 2"):
        control_payload(unpack_header(frames[0]), frames[:count])


@pytest.mark.parametrize("kind, arrays", [
    (Kind.PUSH, dict(keys=np.array([4, 2, 9]), values=np.arange(6, dtype=np.float32).reshape(3, 2))),
    (Kind.PULL, dict(keys=np.array([4, 2, 9]), positions=np.array([0, 5, 7]))),
    (Kind.PULL_REPLY, dict(positions=np.array([1, 3]), values=np.ones((2, 4)))),
    (Kind.TRANSFER, dict(keys=np.array([3]), values=np.ones((1, 2), np.float32), state=np.full((1, 2), 7, np.float32))),
    (Kind.AGG_PUSH, dict(keys=np.array([1, 2]), values=np.zeros((2, 3), np.float32), rounds=np.array([5, 6]))),
])
def test_encode_then_unpack_gives_the_arrays_back(kind, arrays):
    """encode() fills the header's counts, dtypes and flags from the arrays; unpack() reads them back."""
    h = Header(kind, dim=2 if kind == Kind.PULL else 0)
    frames = encode(h, **arrays)
    back = unpack_header(bytes(frames[0]))
    assert back == h and back.n_keys == len(next(iter(arrays.values())))
    p = unpack(back, [frames[0]] + [bytes(memoryview(f)) for f in frames[1:]], state_width=2)
    for name, value in arrays.items():
        assert np.array_equal(getattr(p, name), value) and getattr(p, name).dtype == np.asarray(value).dtype or \
            name in ("keys", "positions", "rounds") and getattr(p, name).dtype == np.int64
