"""Codec: what a request's frames become on the wire when the sender asks for it (pskv.filters):
key caching, compression of keys and values (zstd or lz4), and fp16/bf16 values.

    sender (Endpoint.request, the calling thread)       receiver (Server.handle, pskv-server)
    keys   -> KEYS_REMEMBER + keys, or KEYS_CACHED      decode(): decompress, then the cached key
              + the list's 8-byte hash (seen before)     list by (origin, hash), then float32 values
    values -> float16 / bfloat16 (codes FP16 / BF16)
    frames -> compressed (codec id in the high nibble of the header's dtype / key dtype byte)

Key caching (Li et al.): the sender and the receiver both remember a key list; sending it again
costs 8 bytes. A sender remembers per thread and (cluster id, sending node, destination), in the
order its own socket delivers (one thread's messages to one node arrive in order), at most
CACHED_LISTS lists; later lists travel whole. The cluster id is part of the key because a thread
outlives its cluster: after a second `pskv.init()` in the same thread, the new cluster's nodes
were sent none of the lists the old cluster's were. The receiver keeps what each origin asked it to
remember (content-addressed, so threads that send the same list share an entry). A hash that is
not known at the receiver is a ProtocolError (answered with ERROR), never a wrong key.

Threads and ownership: `Sent` is per thread (threading.local); `Remembered` belongs to the
receiving pskv-server thread.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading

import numpy as np

from ..errors import ConfigError, ProtocolError
from .wire import BF16, FP16, KEY_CODE, KEYS_CACHED, KEYS_REMEMBER, POSITIONS, Header, dtype_code

CACHED_LISTS = 256  # key lists a sending thread remembers per destination
_CODECS = {"zstd": 1, "lz4": 2}
_NAMES = {v: k for k, v in _CODECS.items()}
_MIN_COMPRESS = 256  # bytes: smaller frames travel as they are


@dataclasses.dataclass(frozen=True)
class Codec:
    """How a push's (or pull's) frames travel: `key_cache`, `compress` ("zstd" / "lz4" / None), and
    `quantize` ("fp16" / "bf16" / None: values of float32 tables rounded to 16 bits)."""

    key_cache: bool = False
    compress: str | None = None
    quantize: str | None = None
    level: int = 1  # zstd's level (lz4: its default)

    def __post_init__(self) -> None:
        if self.compress not in (None, *_CODECS):
            raise ConfigError(f"compress={self.compress!r}: use 'zstd', 'lz4' or None")
        if self.quantize not in (None, "fp16", "bf16"):
            raise ConfigError(f"quantize={self.quantize!r}: use 'fp16', 'bf16' or None")
        if self.compress:
            _compressor(self.compress)  # the library is installed, or a clear error now

    def encode(self, frames: list, header: Header, dest: int) -> list:
        """The frames of a request (wire.encode's) as this codec sends them; the header is repacked."""
        keys_at = 1
        values_at = 2 + bool(header.flags & POSITIONS) if len(frames) > 2 + bool(header.flags & POSITIONS) else None
        if self.quantize and values_at is not None:
            values = frames[values_at]
            if values.dtype != np.float32:
                raise ConfigError(f"quantize={self.quantize!r} needs a float32 table, not {values.dtype}")
            frames[values_at], header.dtype = (
                (_to_bf16(values), BF16) if self.quantize == "bf16" else (values.astype(np.float16), FP16)
            )
        if self.key_cache and header.n_keys:
            frames[keys_at], header.key_dtype = _sent(header.cluster, header.sender, dest).encode(frames[keys_at])
        if self.compress:
            code = _CODECS[self.compress]
            for at, field in ((keys_at, "key_dtype"), (values_at, "dtype")):
                if at is not None and _nbytes(frames[at]) >= _MIN_COMPRESS:
                    frames[at] = _compressor(self.compress)(np.ascontiguousarray(frames[at]).data.cast("B"), self.level)
                    setattr(header, field, getattr(header, field) | code << 4)
        frames[0] = header.pack()
        return frames


def decode(header: Header, frames: list, remembered: Remembered) -> list:
    """Plain frames (int64 keys, float32 values, nothing compressed) of a request a Codec encoded;
    the header's codes are set back. Raises ProtocolError for anything that does not fit."""
    special = (
        header.key_dtype >> 4
        or header.dtype >> 4
        or header.key_dtype in (KEYS_REMEMBER, KEYS_CACHED)
        or header.dtype in (FP16, BF16)
    )
    if not special or len(frames) < 2:
        return frames
    frames = list(frames)
    values_at = 2 + bool(header.flags & POSITIONS) if len(frames) > 2 + bool(header.flags & POSITIONS) else None
    for at, field in ((1, "key_dtype"), (values_at, "dtype")):
        code = getattr(header, field) >> 4
        if at is None or not code:
            continue
        name = _NAMES.get(code)
        if name is None:
            raise ProtocolError(f"{header!r}: unknown compression code {code}")
        try:
            frames[at] = _decompressor(name)(_buffer(frames[at]))
        except Exception as exc:  # noqa: BLE001 - any library's error on garbage is a protocol error
            raise ProtocolError(f"{header!r}: a {name} frame that does not decompress ({exc})") from None
        setattr(header, field, getattr(header, field) & 0x0F)
    if header.key_dtype in (KEYS_REMEMBER, KEYS_CACHED):
        frames[1] = remembered.resolve(header, frames[1])
        header.key_dtype = KEY_CODE
    if header.dtype in (FP16, BF16):
        if values_at is None:
            raise ProtocolError(f"{header!r}: 16-bit values, but no values frame")
        raw = np.frombuffer(_buffer(frames[values_at]), np.uint16 if header.dtype == BF16 else np.float16)
        frames[values_at] = (
            (raw.astype(np.uint32) << 16).view(np.float32) if header.dtype == BF16 else raw.astype(np.float32)
        )
        header.dtype = dtype_code(np.float32)
    return frames


class Remembered:
    """The key lists origins asked this node to remember: (origin, hash) -> int64 keys bytes."""

    def __init__(self) -> None:
        self._lists: dict[tuple[int, bytes], bytes] = {}

    def resolve(self, header: Header, frame) -> bytes:
        data = bytes(_buffer(frame))
        if header.key_dtype == KEYS_REMEMBER:
            self._lists[(header.origin, _digest(data))] = data
            return data
        got = self._lists.get((header.origin, data))
        if got is None:
            raise ProtocolError(f"{header!r}: a cached key list this node was never sent (hash {data.hex()})")
        return got

    def __len__(self) -> int:
        return len(self._lists)


class _Sent:
    """One thread's remembered key lists per destination (in the order its socket delivers them)."""

    def __init__(self) -> None:
        self.lists: set[bytes] = set()

    def encode(self, keys) -> tuple:
        data = np.ascontiguousarray(keys).data.cast("B")
        digest = _digest(data)
        if digest in self.lists:
            return digest, KEYS_CACHED
        if len(self.lists) < CACHED_LISTS:
            self.lists.add(digest)
            return keys, KEYS_REMEMBER
        return keys, KEY_CODE


_local = threading.local()


def _sent(cluster: int, sender: int, dest: int) -> _Sent:
    """The calling thread's lists sent as node `sender` of cluster `cluster` to node `dest`.

    Keyed by all three: a receiver remembers what each origin of its own cluster sent it, so a
    list sent to rank `dest` of an earlier cluster (a second `pskv.init()` in this thread), or
    as another node of this process, is unknown there. A thread keeps only the lists of the last
    cluster it sent to: dropping lists is always safe (they travel whole and are remembered
    again), and caches of clusters that ended would otherwise stay for the thread's life."""
    caches = _local.__dict__.get("caches")
    if caches is None or _local.cluster != cluster:
        caches = _local.caches = {}
        _local.cluster = cluster
    cache = caches.get((sender, dest))
    if cache is None:
        cache = caches[(sender, dest)] = _Sent()
    return cache


def forget_sent() -> None:
    """Drop the calling thread's sender caches (a test's fresh start; a node that restarts has fresh threads)."""
    _local.__dict__.pop("caches", None)


def _digest(data) -> bytes:
    return hashlib.blake2b(data, digest_size=8).digest()


def _nbytes(frame) -> int:
    return frame.nbytes if hasattr(frame, "nbytes") else len(frame)


def _buffer(frame):
    return frame.buffer if hasattr(frame, "buffer") else memoryview(frame)


def _to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even."""
    u = np.ascontiguousarray(values).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def _compressor(name: str):
    try:
        if name == "zstd":
            import zstandard

            return lambda data, level: zstandard.ZstdCompressor(level=level).compress(data)
        import lz4.frame

        return lambda data, level: lz4.frame.compress(data)
    except ImportError:
        raise ConfigError(
            f"compress={name!r} needs the {'zstandard' if name == 'zstd' else 'lz4'} package: "
            "pip install 'pskv[compress]'"
        ) from None


def _decompressor(name: str):
    if name == "zstd":
        import zstandard

        return lambda data: zstandard.ZstdDecompressor().decompress(data)
    import lz4.frame

    return lz4.frame.decompress
