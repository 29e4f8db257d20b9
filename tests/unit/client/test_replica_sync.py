"""client.replica_sync: a flush (node.leave, a checkpoint, worker.wait_replica_sync) waits for the
changes the pskv-replica thread is sending at that moment, not only for the rounds registered."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

import pskv
from helpers import recording_endpoint, wait_until
from pskv import updaters
from pskv.client.replica_sync import ReplicaSync
from pskv.net.wire import Kind, unpack_header
from pskv.store.replicas import Replicas
from pskv.store.spec import TableSpec, as_init


@pytest.mark.timeout(60)
def test_flush_waits_for_the_round_the_replica_thread_is_sending():
    """The thread took node 0's change and is about to send it when flush() starts: flush returns
    only once node 1 acknowledged that change (it used to return at once: its own round found
    nothing to take and the thread's round was not registered yet, so a leave could lose it)."""
    spec = TableSpec("h", 8, 1, np.dtype(np.float32), updaters.get("add"), as_init(0.0), table_id=0)
    replicas = Replicas(spec, np.array([0, 3]), peers=[1])
    state = SimpleNamespace(spec=spec, shard=SimpleNamespace(replicas=replicas), next_sync=0.0, copies=None,
                            options=SimpleNamespace(replicate=pskv.Replicate(keys=[0, 3], syncs_per_sec=1)))
    endpoint, transport = recording_endpoint(0)
    stop = threading.Event()
    sync = ReplicaSync(endpoint, 2, SimpleNamespace(tables=lambda: [state]), stop, lambda: False, lambda: [0, 1])
    taken, go = threading.Event(), threading.Event()
    take = replicas.take_deltas

    def paused(threshold):  # the thread stops right after its take, before it sends
        got = take(threshold)
        if threading.current_thread().name.startswith("pskv-replica") and len(got[0]):
            taken.set()
            go.wait(30)
        return got

    replicas.take_deltas = paused
    replicas.push(np.array([0]), np.full((1, 1), 5.0, np.float32))
    flusher = threading.Thread(target=sync.flush, kwargs={"timeout": 30}, name="test-flush", daemon=True)
    sync.start()
    try:
        assert taken.wait(30)
        flusher.start()
        flusher.join(0.5)  # (an order, not a time check: the flush gets its chance to run first)
        go.set()
        wait_until(lambda: transport.sent, what="the thread's REPLICA_SYNC")
        (dest, frames), = transport.sent
        header = unpack_header(bytes(frames[0]))
        assert dest == 1 and header.kind == Kind.REPLICA_SYNC and header.n_keys == 1
        assert flusher.is_alive(), "flush returned before node 1 acknowledged the change"
        endpoint.tracker.on_reply(header.request_id, 1, 1)
        flusher.join(30)
        assert not flusher.is_alive()
    finally:
        go.set()
        stop.set()
        sync.stop()
