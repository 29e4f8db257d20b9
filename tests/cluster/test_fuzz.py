"""Garbage on the wire: a server that receives malformed or foreign messages answers or drops them, changes
nothing, and keeps serving.

The main test starts a real 2-node cluster (pskv.launch) and throws a few hundred seeded-random bad messages
straight at node 1's inbox from this process. The in-process tests below it pin wire-level bugs found so far.
"""

from __future__ import annotations

import json
import struct
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

import pskv
from pskv.net import auth, outbox
from pskv.net.wire import COORDINATOR, VERSION, Header, Kind, control, dtype_code

from helpers import free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SRC = Path(__file__).resolve().parents[2] / "src"
ROWS, DIM = 100, 4
WIRE = struct.Struct("<4sBBHIhHQIIIBBhHH")  # the header layout, spelled out: a change to it must be deliberate
_BAD_CODES = [c for c in range(256) if c & 0x0F > 8 or c >> 4 > 2]  # no dtype code, plain or net.codec's
F32, F64, I64, I32 = (dtype_code(np.float32), dtype_code(np.float64), dtype_code(np.int64), dtype_code(np.int32))
RID = 1 << 40  # request ids of our messages: far above anything node 0's tracker hands out

NODE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import numpy as np
    import pskv

    work = Path(sys.argv[1])
    ROWS, DIM = 100, 4
    node = pskv.init()
    t = node.table("t", rows=ROWS, dim=DIM)
    expected = (np.arange(ROWS)[:, None] * 10 + np.arange(DIM)).astype(np.float32)  # row r: r*10 + column
    w = node.worker()
    if node.rank == 0:
        t.set(np.arange(ROWS), expected).wait(30)
    w.barrier(timeout=30)
    if node.rank == 1:
        info = {"address": node._transport.address, "cluster": node.cluster, "rank": node.rank,
                "table": t.spec.table_id, "range": list(node.catalog.get("t").ranges.manager_range(1))}
        print("READY " + json.dumps(info), flush=True)
    if node.rank == 0:
        deadline = time.monotonic() + 60
        while not (work / "go").exists():  # the test has sent everything
            assert time.monotonic() < deadline, "no go from the test"
            time.sleep(0.02)
        expected[99] += 1000  # the test's last message, a valid push of +1000 to row 99
        while not np.array_equal(t.pull([99], timeout=30)[0], expected[99]):  # then every earlier one is done
            assert time.monotonic() < deadline, "the marker push never arrived"
            time.sleep(0.02)
        got = t.pull(np.arange(ROWS), timeout=30)
        changed = sorted(set(np.flatnonzero((got != expected).any(axis=1)).tolist()))
        t.push(np.arange(ROWS), np.ones((ROWS, DIM), np.float32)).wait(30)  # rows on both nodes
        after = t.pull(np.arange(ROWS)[::-1], timeout=30)
        print("RESULT " + json.dumps({"changed_rows": changed,
                                      "still_works": bool(np.array_equal(after, (expected + 1)[::-1]))}), flush=True)
    w.barrier(timeout=60)
    if node.rank == 1:
        print("STATS " + json.dumps({"errors": node.server.errors, "requests": node.server.requests,
                                     "dropped": node.dropped}), flush=True)
    w.close()
    node.shutdown(timeout=30)
    print("DONE", flush=True)
""")


# ---- message builders: each returns (frames, what node 1 does with it) -------------------------------------------
# "error": a request from a valid peer that the server must answer with ERROR (counted in server.errors)
# "dropped": not a message of this cluster (counted in node.dropped)
# "ignored": a reply from a valid peer that matches no request (counted nowhere)
# "pull": a valid PULL; the PULL_REPLY goes to node 0, which drops it as an unknown request


class Fuzz:
    def __init__(self, info: dict, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.cluster = info["cluster"]
        self.table = info["table"]
        self.lo, self.hi = info["range"]
        self.rid = RID

    def header(self, kind=Kind.PUSH, n=None, **fields) -> Header:
        self.rid += 1
        n = int(self.rng.integers(1, 20)) if n is None else n
        base = dict(cluster=self.cluster, sender=0, table=self.table, request_id=self.rid, part=0, n_keys=n,
                    dim=DIM, dtype=F32 if kind != Kind.PULL else 0, key_dtype=I64,
                    flags=0)  # flags change the frame layout (POSITIONS, STATE)
        return Header(kind, **(base | fields))

    def own_keys(self, n: int) -> np.ndarray:
        return self.rng.integers(self.lo, self.hi, size=n).astype(np.int64)

    def values(self, n: int, dim: int = DIM, dtype=np.float32) -> np.ndarray:
        return self.rng.standard_normal((n, dim)).astype(dtype) * 1e6

    def frames(self, h: Header, keys=None, values=None) -> list[bytes]:
        out = [h.pack(), (self.own_keys(h.n_keys) if keys is None else keys).tobytes()]
        if h.kind != Kind.PULL:
            out.append((self.values(h.n_keys) if values is None else values).tobytes())
        return out

    def data_kind(self) -> Kind:
        return [Kind.PUSH, Kind.SET, Kind.PULL][int(self.rng.integers(0, 3))]

    # -- not a pskv header at all
    def random_bytes(self):
        count = int(self.rng.integers(1, 5))
        return [self.rng.bytes(int(self.rng.integers(0, 90))) for _ in range(count)], "dropped"

    def truncated_header(self):
        h = self.header()
        cut = int(self.rng.integers(0, WIRE.size))
        return [h.pack()[:cut], *self.frames(h)[1:]], "dropped"

    def long_header(self):
        h = self.header()
        return [h.pack() + self.rng.bytes(int(self.rng.integers(1, 8))), *self.frames(h)[1:]], "dropped"

    def bad_magic_version_kind_dtype(self):
        h = self.header()
        fields = list(WIRE.unpack(h.pack()))
        which = int(self.rng.integers(0, 5))
        if which == 0:
            fields[0] = self.rng.bytes(4).replace(b"P", b"Q")
        elif which == 1:
            fields[1] = int(self.rng.choice([v for v in (0, 1, 2, 3, 255) if v != VERSION]))
        elif which == 2:
            fields[2] = int(self.rng.choice([0, 44, 50, 99, 200, 255]))  # kinds no Kind names (43 is INTENT)
        else:
            fields[11 if which == 3 else 12] = int(self.rng.choice(_BAD_CODES))
        return [WIRE.pack(*fields), *self.frames(h)[1:]], "dropped"

    # -- well-formed, but not from this cluster: would change rows if it were accepted
    def wrong_cluster(self):
        choices = [0, self.cluster ^ 1, self.cluster ^ 0xFFFF0000, int(self.rng.integers(1, 2**32))]
        cluster = int(self.rng.choice(choices))
        if cluster == self.cluster:
            cluster ^= 1
        h = self.header(self.data_kind(), cluster=cluster)
        return self.frames(h), "dropped"

    def wrong_sender(self):
        h = self.header(self.data_kind(), sender=int(self.rng.choice([2, 3, 100, 32767, -2, -32768])))
        return self.frames(h), "dropped"

    def claims_coordinator(self):
        """sender = COORDINATOR, but frames a control message cannot have (3 frames, or a non-JSON payload)."""
        if self.rng.random() < 0.5:
            return self.frames(self.header(Kind.PUSH, sender=COORDINATOR)), "dropped"
        kind = [Kind.ABORT, Kind.NODE_FAILED, Kind.SHUTDOWN_OK, Kind.WELCOME, Kind.TICK][int(self.rng.integers(0, 5))]
        frames = control(kind, self.cluster, COORDINATOR)
        return [frames[0], b"\xff" + self.rng.bytes(int(self.rng.integers(0, 30)))], "dropped"

    # -- right cluster and sender: the server must answer ERROR and change nothing
    def truncated_keys(self):
        h = self.header(self.data_kind())
        frames = self.frames(h)
        frames[1] = frames[1][:-int(self.rng.integers(1, len(frames[1]) + 1))]
        return frames, "error"

    def truncated_values(self):
        h = self.header([Kind.PUSH, Kind.SET][int(self.rng.integers(0, 2))])
        frames = self.frames(h)
        frames[2] = frames[2][:-int(self.rng.integers(1, len(frames[2]) + 1))]
        return frames, "error"

    def wrong_frame_count(self):
        h = self.header(self.data_kind())
        frames = self.frames(h)
        frames = frames[:-1] if self.rng.random() < 0.5 else frames + [self.rng.bytes(8)]
        return frames, "error"

    def keys_out_of_range(self):
        h = self.header(self.data_kind())
        n = h.n_keys
        # keys of another node are no error any more: they are forwarded to their owner (relocation)
        bad = self.rng.choice([self.rng.integers(ROWS, 2**40, size=n), -self.rng.integers(1, 2**40, size=n)])
        keys = self.own_keys(n)
        keys[int(self.rng.integers(0, n))] = bad[0]  # one bad key spoils the whole request
        return self.frames(h, keys=keys), "error"

    def unknown_table(self):
        h = self.header(self.data_kind(), table=int(self.rng.integers(self.table + 1, 1 << 16)))
        return self.frames(h), "error"

    def wrong_dim_or_dtype(self):
        kind = [Kind.PUSH, Kind.SET][int(self.rng.integers(0, 2))]
        n = int(self.rng.integers(1, 20))
        if self.rng.random() < 0.5:  # consistent frames, but the table has another dim
            dim = int(self.rng.choice([1, 2, 3, 5, 8]))
            h = self.header(kind, n=n, dim=dim)
            return self.frames(h, values=self.values(n, dim)), "error"
        if self.rng.random() < 0.5:  # float64 values for a float32 table
            h = self.header(kind, n=n, dtype=F64)
            return self.frames(h, values=self.values(n, dtype=np.float64)), "error"
        h = self.header(kind, n=n, key_dtype=F64)  # keys that claim to be floats
        return self.frames(h, keys=self.own_keys(n).astype(np.float64)), "error"

    def huge_count(self):
        h = self.header(self.data_kind(), n=int(self.rng.choice([2**31, 2**32 - 1])))
        return self.frames(h, keys=self.own_keys(3), values=self.values(3)), "error"

    # -- harmless: a valid pull, or a reply/control message nobody waits for
    def valid_pull(self):
        h = self.header(Kind.PULL, key_dtype=int(self.rng.choice([I64, I32])))
        keys = self.own_keys(h.n_keys).astype(np.int64 if h.key_dtype == I64 else np.int32)
        return self.frames(h, keys=keys), "pull"

    def stray_reply(self):
        kind = [Kind.PULL_REPLY, Kind.ACK, Kind.ERROR, Kind.HEARTBEAT, Kind.BARRIER][int(self.rng.integers(0, 5))]
        h = self.header(kind)
        extra = {Kind.PULL_REPLY: [self.values(h.n_keys).tobytes()], Kind.ERROR: [b"no such request"],
                 Kind.HEARTBEAT: [b"{}"], Kind.BARRIER: [b"{\"gen\": 0}"]}.get(kind, [])
        # a node never receives HEARTBEAT or BARRIER (they go to the coordinator): no handler takes them
        return [h.pack(), *extra], "dropped" if kind in (Kind.HEARTBEAT, Kind.BARRIER) else "ignored"

    # -- packed frames (net.outbox): each message inside counts as if sent alone; a broken one is dropped whole
    def packed(self):
        inner = [self.single() for _ in range(int(self.rng.integers(1, 5)))]
        frames = [outbox.pack([[bytes(f) for f in frames] for frames, _ in inner])]
        return frames, [what for _, what in inner]

    def broken_packed(self):
        frame = outbox.pack([self.frames(self.header(Kind.PUSH)) for _ in range(int(self.rng.integers(1, 4)))])
        if self.rng.random() < 0.5:  # cut into the last frame's bytes
            return [frame[:len(frame) - 9 - int(self.rng.integers(0, 16))]], "dropped"
        count = len(frame[8:]) // 4  # claims more lengths than the frame holds
        return [frame[:4] + (count + 10_000).to_bytes(4, "little") + frame[8:]], "dropped"

    def single(self):
        builders = [self.random_bytes, self.truncated_header, self.long_header, self.bad_magic_version_kind_dtype,
                    self.wrong_cluster, self.wrong_sender, self.claims_coordinator, self.truncated_keys,
                    self.truncated_values, self.wrong_frame_count, self.keys_out_of_range, self.unknown_table,
                    self.wrong_dim_or_dtype, self.huge_count, self.valid_pull, self.stray_reply]
        return builders[int(self.rng.integers(0, len(builders)))]()

    def any(self):
        """One message as frames, and what node 1 does with it (a list of those for a packed frame)."""
        roll = self.rng.random()
        return self.packed() if roll < 0.1 else self.broken_packed() if roll < 0.15 else self.single()

    def marker(self):
        """The last message: a valid PUSH of +1000 to row 99, so node 0 sees when everything before it is done."""
        h = self.header(Kind.PUSH, n=1)
        return self.frames(h, keys=np.array([99], np.int64), values=np.full((1, DIM), 1000, np.float32))


def _line(cluster, rank: int, prefix: str) -> dict | None:
    for line in cluster.output(rank).splitlines():
        if line.startswith(prefix + " "):
            return json.loads(line[len(prefix) + 1:])
    return None


@pytest.mark.parametrize("seed", [20240611, 7])
def test_fuzz_server_survives_garbage(cluster_factory, tmp_path, seed):
    """Random bytes, broken headers, foreign clusters and bad requests sent to node 1 change no row; each bad
    request of this cluster gets an ERROR reply, everything foreign is dropped, and the cluster then still
    pushes and pulls exactly and shuts down cleanly."""
    script = tmp_path / "node.py"
    script.write_text(NODE_SCRIPT)
    cluster = cluster_factory(2, [sys.executable, str(script), str(tmp_path)], env={"PYTHONPATH": str(SRC)})

    deadline = time.monotonic() + 60
    while (info := _line(cluster, 1, "READY")) is None:
        assert time.monotonic() < deadline and len(cluster.alive_pids()) == 2, cluster.logs_tail()
        time.sleep(0.05)
    assert info["rank"] == 1 and info["range"] == [50, 100], info

    fuzz = Fuzz(info, seed)
    messages = [fuzz.any() for _ in range(400)]
    whats = [w for _, what in messages for w in (what if isinstance(what, list) else [what])]
    assert any(isinstance(what, list) for _, what in messages)  # some packed frames among them
    counts = {kind: whats.count(kind) for kind in ("error", "dropped", "ignored", "pull")}
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDTIMEO, 10_000)
    auth.load(cluster.secret_file).client(sock)  # garbage from a holder of the secret: past the handshake
    try:
        sock.connect(f"tcp://{info['address']}")
        for frames, _ in messages:
            sock.send_multipart(frames)
        sock.send_multipart(fuzz.marker())
        (tmp_path / "go").write_text("")
        status = cluster.wait(timeout=90)
    finally:
        sock.close(linger=0)
        ctx.term()

    assert status == 0, cluster.logs_tail()
    result, stats = _line(cluster, 0, "RESULT"), _line(cluster, 1, "STATS")
    assert result == {"changed_rows": [], "still_works": True}, (seed, result)
    assert stats["errors"] == counts["error"], (seed, stats, counts)
    assert stats["dropped"] == counts["dropped"], (seed, stats, counts)
    # every bad request, every valid pull, the marker; plus node 0's pulls and pushes of rows 50..99
    assert stats["requests"] >= counts["error"] + counts["pull"] + 1, (seed, stats, counts)
    assert "DONE" in cluster.output(0) and "DONE" in cluster.output(1), cluster.logs_tail()


# ---- in-process: wire-level bugs ---------------------------------------------------------------------------------


def _in_threads(*fns, timeout: float = 30) -> list:
    results: list = [None] * len(fns)

    def body(i, fn):
        try:
            results[i] = fn()
        except BaseException as exc:  # noqa: BLE001
            results[i] = exc

    threads = [threading.Thread(target=body, args=(i, fn), name=f"test-fuzz-{i}", daemon=True)
               for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads)
    return results


def _send(address: str, frames: list) -> None:
    """Deliver one message to a node's inbox from a throwaway socket."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    try:
        sock.connect(f"tcp://{address}")
        sock.send_multipart(frames)
    finally:
        sock.close(linger=2000)
        ctx.term()


@pytest.mark.parametrize("kind, payload", [(Kind.NODE_FAILED, {"rank": 0, "reason": "spoofed"}),
                                           (Kind.SHUTDOWN_OK, {})], ids=["node_failed", "shutdown_ok"])
def test_fuzz_foreign_coordinator_message_ignored(kind, payload):
    """A coordinator message carrying another cluster's id is dropped (counted, once it arrived) and leaves
    the node working and in the cluster."""
    node = pskv.init(heartbeat_interval=0.1)
    worker = node.worker()
    try:
        t = node.table("t", rows=10, dim=2)
        _send(node._transport.address, control(kind, node.cluster ^ 0x5A5A, COORDINATOR, payload))
        wait_until(lambda: node.dropped, what="the node dropping the foreign message")  # not a fixed sleep
        assert node.dropped == 1 and "up" in repr(node), repr(node)
        assert t.pull([1], timeout=30).tolist() == [[0.0, 0.0]]
        worker.barrier(timeout=30)  # still in the cluster: the coordinator releases its barrier
    finally:
        worker.close()
        node.shutdown(timeout=5)


@pytest.mark.parametrize("n_keys, dim", [(1, 2), (3, 1)])
def test_fuzz_pull_reply_of_wrong_shape_fails_request(n_keys, dim):
    """A PULL_REPLY whose shape differs from the request's (3 keys, dim 2) fails the pull with a PskvError."""
    address = f"127.0.0.1:{free_port()}"
    nodes = _in_threads(*[lambda r=r: pskv.init(coordinator=address, num_nodes=2, rank=r, shared_memory=False,
                                                # node 1 drops its own replies, so ours is the only one
                                                test_drop_rate=1.0 if r == 1 else 0.0) for r in range(2)])
    try:
        assert all(isinstance(n, pskv.Node) for n in nodes), nodes
        tables = _in_threads(*[lambda n=n: n.table("t", rows=10, dim=2) for n in nodes])
        fut = tables[0].pull_async([6, 7, 8])  # rows of node 1
        (rid,) = list(nodes[0].tracker._pending)
        h = Header(Kind.PULL_REPLY, cluster=nodes[0].cluster, sender=1, table=0, request_id=rid, part=0,
                   n_keys=n_keys, dim=dim, dtype=F32)
        _send(nodes[0]._transport.address, [h.pack(), np.ones((n_keys, dim), np.float32).tobytes()])
        with pytest.raises(pskv.PskvError):
            fut.wait(30)
    finally:
        _in_threads(*[lambda n=n: n.shutdown(timeout=5) for n in nodes if isinstance(n, pskv.Node)])
