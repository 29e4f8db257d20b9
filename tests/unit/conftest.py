"""Fixtures of the unit tier."""

from __future__ import annotations

import pytest

import pskv


@pytest.fixture
def node():
    """A 1-node cluster (no PSKV_* variables), shut down on every path."""
    n = pskv.init()
    try:
        yield n
    finally:
        n.shutdown(timeout=10)
