"""net.codec: what pskv.filters' wire filters do to a request's frames, and how the receiver undoes it."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import pskv
from pskv.net import codec
from pskv.net.codec import Codec, Remembered, decode
from pskv.net.wire import Header, Kind, encode, unpack, unpack_header

pytestmark = pytest.mark.timeout(60)


def _push(keys, values, positions=None):
    header = Header(Kind.PUSH, table=1, request_id=7, origin=3, dim=values.shape[1])
    return header, encode(header, keys=keys, positions=positions, values=values)


def _through(c: Codec, keys, values, remembered, dest=1, positions=None):
    """Encode as a sender thread does, then decode as the receiver does; returns (bytes on the wire, payload)."""
    header, frames = _push(keys, values, positions)
    frames = c.encode(frames, header, dest)
    sent = sum(len(f) if isinstance(f, bytes) else f.nbytes for f in frames)
    header = unpack_header(frames[0])  # what the receiver parses
    plain = decode(header, frames, remembered)
    return sent, unpack(header, plain)


@pytest.fixture(autouse=True)
def fresh_sender_cache():
    codec.forget_sent()
    yield
    codec.forget_sent()


@pytest.mark.parametrize("compress,positions", list(itertools.product([None, "zstd", "lz4"], [False, True])))
def test_keys_and_float32_values_arrive_exactly(compress, positions):
    rng = np.random.default_rng(1)
    keys = np.sort(rng.integers(0, 2**62, 500)).astype(np.int64)
    values = rng.standard_normal((500, 3)).astype(np.float32)
    pos = np.arange(500, dtype=np.int64) * 2 if positions else None
    _, p = _through(Codec(compress=compress), keys, values, Remembered(), positions=pos)
    assert np.array_equal(p.keys, keys) and np.array_equal(p.values, values)
    assert pos is None or np.array_equal(p.positions, pos)


@pytest.mark.parametrize("quantize,tol", [("fp16", 1e-3), ("bf16", 8e-3)])
def test_quantized_values_arrive_as_float32_within_16_bits(quantize, tol):
    values = np.random.default_rng(2).uniform(-4, 4, (300, 2)).astype(np.float32)
    sent, p = _through(Codec(quantize=quantize), np.arange(300), values, Remembered())
    assert p.values.dtype == np.float32
    assert np.allclose(p.values, values, rtol=tol, atol=0)
    plain, _ = _through(Codec(), np.arange(300), values, Remembered())
    assert plain - sent == 300 * 2 * 2  # two bytes saved per value


def test_bf16_rounds_to_nearest_even():
    x = np.array([[1.0 + 2**-8], [1.0 + 3 * 2**-8], [-2.5]], np.float32)  # ties: down to even, up to even
    _, p = _through(Codec(quantize="bf16"), np.arange(3), x, Remembered())
    assert p.values[:, 0].tolist() == [1.0, 1.0 + 4 * 2**-8, -2.5]


def test_a_repeated_key_list_costs_8_bytes_and_arrives_whole():
    keys = np.arange(0, 4000, 3, dtype=np.int64)
    values = np.ones((len(keys), 1), np.float32)
    remembered = Remembered()
    first, p1 = _through(Codec(key_cache=True), keys, values, remembered)
    again, p2 = _through(Codec(key_cache=True), keys, values, remembered)
    assert first - again == keys.nbytes - 8
    assert np.array_equal(p1.keys, keys) and np.array_equal(p2.keys, keys) and len(remembered) == 1
    other, p3 = _through(Codec(key_cache=True), keys, values, remembered, dest=2)  # another destination
    assert other == first and np.array_equal(p3.keys, keys)


def test_an_unknown_cached_list_is_a_protocol_error_not_wrong_keys():
    keys, values = np.arange(10), np.ones((10, 1), np.float32)
    _through(Codec(key_cache=True), keys, values, Remembered())
    with pytest.raises(pskv.ProtocolError, match="never sent"):
        _through(Codec(key_cache=True), keys, values, Remembered())  # a receiver that did not see the first


def test_a_sender_remembers_at_most_cached_lists_per_destination(monkeypatch):
    monkeypatch.setattr(codec, "CACHED_LISTS", 2)
    remembered, values = Remembered(), np.ones((4, 1), np.float32)
    sizes = [_through(Codec(key_cache=True), np.arange(i, i + 4), values, remembered)[0] for i in range(3)]
    again = [_through(Codec(key_cache=True), np.arange(i, i + 4), values, remembered)[0] for i in range(3)]
    assert again[0] < sizes[0] and again[1] < sizes[1] and again[2] == sizes[2]  # the third travels whole
    assert len(remembered) == 2


def test_a_frame_that_does_not_decompress_is_a_protocol_error():
    header, frames = _push(np.arange(100), np.ones((100, 1), np.float32))
    frames = Codec(compress="zstd").encode(frames, header, 1)
    frames[1] = b"\x00" * 40
    with pytest.raises(pskv.ProtocolError, match="does not decompress"):
        decode(unpack_header(frames[0]), frames, Remembered())


def test_codec_options_are_checked():
    with pytest.raises(pskv.ConfigError, match="compress"):
        Codec(compress="gzip")
    with pytest.raises(pskv.ConfigError, match="quantize"):
        Codec(quantize="int8")
    header, frames = _push(np.arange(3), np.ones((3, 1), np.float64))
    with pytest.raises(pskv.ConfigError, match="float32"):
        Codec(quantize="fp16").encode(frames, header, 1)
