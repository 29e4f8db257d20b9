"""Fixtures shared by every test tier.

`clean_pskv_environ` (autouse) removes PSKV_* from os.environ, so no test sees the variables of
a launcher it runs under. `cluster_factory` starts clusters through pskv.launch and stops every
one of them on teardown, on every path, with the nodes' last lines in the failure message.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def clean_pskv_environ(monkeypatch):
    """Each test starts with no PSKV_* variable in its environment."""
    for name in [name for name in os.environ if name.startswith("PSKV_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def cluster_factory(tmp_path):
    """`make(nodes, command, **start_local_kwargs) -> Cluster`; logs go to tmp_path/cluster-K
    unless log_dir= is given. Teardown shuts every cluster down and asserts nothing survives."""
    from pskv.launch import start_local

    clusters = []

    def make(nodes, command, **kwargs):
        kwargs.setdefault("log_dir", tmp_path / f"cluster-{len(clusters)}")
        cluster = start_local(nodes, command, **kwargs)
        clusters.append(cluster)
        return cluster

    try:
        yield make
    finally:
        survivors = []
        for cluster in clusters:
            cluster.shutdown(timeout=10)
            if cluster.alive_pids():
                survivors.append(f"{cluster!r}\n{cluster.logs_tail()}")
        assert not survivors, "\n".join(survivors)
