"""Fixtures of the monitor tests."""

from __future__ import annotations

import pytest

import pskv
from helpers import free_port
from pskv.errors import ConfigError


def init_with_metrics():
    """A 1-node cluster serving metrics, and its port (a port another process took meanwhile: another)."""
    for _ in range(3):
        port = free_port()
        try:
            return pskv.init(metrics_port=port), port
        except ConfigError as exc:
            if "cannot serve metrics" not in str(exc):
                raise
    raise AssertionError("3 free ports were taken before the node could bind them")


@pytest.fixture
def metrics_node():
    """(node, port): node 0 of a private cluster with its exporter at 127.0.0.1:port; shut down on every path."""
    node, port = init_with_metrics()
    try:
        yield node, port
    finally:
        node.shutdown(timeout=10)
