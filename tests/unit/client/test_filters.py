"""pskv.filters: parsing, and what the selection filters send (exact accounting)."""

from __future__ import annotations

import numpy as np
import pytest

import pskv
from pskv.filters import Chain, Compress, KeyCache, Kkt, Quantize, SignificantlyModified, codec_of, parse

pytestmark = pytest.mark.timeout(60)


def test_parse_reads_the_command_line_form_and_prints_it_back():
    got = parse("kkt, sig:0.01,keycache,zstd,bf16")
    assert list(got) == [Kkt(), SignificantlyModified(0.01), KeyCache(), Compress("zstd"), Quantize("bf16")]
    assert str(got) == "kkt,sig:0.01,keycache,zstd,bf16" and not parse("")
    c = codec_of(got)
    assert (c.key_cache, c.compress, c.quantize) == (True, "zstd", "bf16")
    assert codec_of(parse("kkt,sig:1")) is None


@pytest.mark.parametrize("bad", ["gzip", "sig", "sig:x", "kkt:y"])
def test_parse_rejects_unknown_filters(bad):
    with pytest.raises(pskv.ConfigError, match="use kkt"):
        parse(bad)


def test_significantly_modified_sends_everything_eventually_and_nothing_twice():
    rng = np.random.default_rng(0)
    chain = Chain([SignificantlyModified(0.5)])
    keys, weights = np.arange(20, dtype=np.uint64), np.zeros(20)
    offered, sent = np.zeros(20), np.zeros(20)
    for _ in range(200):
        cols = rng.choice(20, 8, replace=False)
        grads = rng.uniform(-0.3, 0.3, 8)
        offered[cols] += grads
        c, g = chain.select(keys, cols, grads, weights)
        assert (np.abs(g) >= 0.5).all()
        np.add.at(sent, c, g)
    assert np.allclose(sent + chain._residual, offered)  # nothing lost, nothing sent twice
    assert chain.sent < chain.offered


def test_kkt_skips_exactly_the_zero_weights_inside_the_l1_band():
    chain = Chain([Kkt()], l1=0.1)
    weights = np.array([0.0, 0.0, 0.3, 0.0])
    cols, grads = chain.select(np.arange(4), np.arange(4), np.array([0.05, 0.2, 0.01, -0.1]), weights)
    assert cols.tolist() == [1, 2] and grads.tolist() == [0.2, 0.01]  # -0.1: on the border, the step keeps 0
    server = np.array([0.5, 0.0, 0.0, 0.0])  # the server's last gradients win over this push's
    cols, _ = chain.select(np.arange(4), np.arange(4), np.array([0.05, 0.2, 0.01, -0.1]), weights, server)
    assert cols.tolist() == [0, 2]
    cols, _ = chain.select(np.arange(4), np.arange(4), np.zeros(4), weights, server, kkt=False)
    assert cols.tolist() == [0, 1, 2, 3]


def test_a_tables_filters_are_wire_filters_that_fit_its_dtype(node):
    """node.table(filters=) takes wire filters in any form (objects, a Chain, the parse form) and keeps
    them as the table's codec; selection filters and 16-bit values of a float64 table are refused
    before the table exists."""
    t = node.table("a", rows=10, dim=2, filters="keycache,zstd")
    assert node.catalog.get("a").codec == codec_of([KeyCache(), Compress("zstd")])
    node.table("b", rows=10, dim=2, filters=Chain(parse("kkt,fp16"), l1=0.1).wire)
    assert node.catalog.get("b").codec.quantize == "fp16"
    with pytest.raises(pskv.ConfigError, match="choose which gradients"):
        node.table("c", rows=10, filters=[Kkt(), KeyCache()])
    with pytest.raises(pskv.ConfigError, match="float32 table, not float64"):
        node.table("c", rows=10, dtype="float64", filters=[Quantize("bf16")])
    with pytest.raises(pskv.ConfigError, match="asynchronous tables"):
        node.table("c", rows=10, consistency=pskv.BSP(), filters="keycache")
    assert "c" not in [s.spec.name for s in node.catalog.tables()]
    t.push([1, 2], np.ones((2, 2), np.float32)).wait()  # a 1-node cluster: local, the filters unused
    assert (t.pull([1, 2]) == 1).all()
