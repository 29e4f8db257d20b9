"""Fixtures shared by every test tier.

`clean_pskv_environ` (autouse) removes PSKV_* from os.environ, so no test sees the variables of
a launcher it runs under; the two that say where the user keeps data (PSKV_DATA_DIR,
PSKV_LAPSE_TOY) stay, for the tests and for the clusters they start. `cluster_factory` starts
clusters through pskv.launch and stops every one of them on teardown, on every path, with the
nodes' last lines in the failure message. Shared helpers (wait_until, free_port) are in helpers.py.
"""

from __future__ import annotations

import os

import pytest


# Where the data sets are (pskv.data.fetch reads them, in this process and in the nodes): no launcher
# sets them and no node setting depends on them, so a user's values stay; a test of their
# resolution sets or deletes them itself.
USER_DATA_VARS = ("PSKV_DATA_DIR", "PSKV_LAPSE_TOY")
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "JOB_COMPLETION_INDEX")


def pytest_collection_modifyitems(config, items):
    """Tests marked `long` first, longest first (`long(SECONDS)`; a stable sort keeps the rest in
    order): the test processes take them while many short ones are still left to fill in beside
    them, instead of one of them running alone at the end of the run."""
    def seconds(item) -> float:
        mark = item.get_closest_marker("long")
        return 0.0 if mark is None else float(mark.args[0]) if mark.args else 15.0

    items.sort(key=lambda item: -seconds(item))


@pytest.fixture(autouse=True)
def clean_pskv_environ(monkeypatch):
    """Each test starts with no PSKV_* variable in its environment but USER_DATA_VARS, and none of the
    launchers' that pskv maps (pskv.environments): `make test` inside a SLURM step, under torchrun or in a
    Kubernetes pod must not make a test's one-process pskv.init() wait for a cluster."""
    for name in [n for n in os.environ if n.startswith("PSKV_") and n not in USER_DATA_VARS
                 or n.startswith("SLURM_") or n in LAUNCHER_VARS]:
        monkeypatch.delenv(name)


@pytest.fixture
def no_user_data_vars(monkeypatch):
    """Not even USER_DATA_VARS: for tests that compare a node's whole PSKV_* environment."""
    for name in USER_DATA_VARS:
        monkeypatch.delenv(name, raising=False)


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
