"""Transport: move multipart frames between nodes over ZeroMQ. The only module that imports zmq
(net.outbox sends on the sockets made here).

Each node binds one PULL socket (its inbox); every peer, and the coordinator, reaches it
through PUSH sockets. Requests and replies are both plain messages to a rank's inbox, as in
ps-lite's van: the receiving thread tells them apart by the header. A thread that blocks on its
own requests may also bind a `ReplyBox` (a PULL socket of its own on the node's host): requests
that name its port get their replies there, and the waiting thread receives them itself, with
no hand-off through the pskv-server thread.

Threads and ownership: the inbox socket belongs to the one thread that calls `recv()` (the
node's pskv-server thread). Outgoing PUSH sockets are thread-local: every thread that calls
`send()` gets its own socket to each destination (a rank's inbox, or a port of a rank's host)
the first time it sends there (an `Outbox`), so no socket is ever shared and no lock is held
while sending (a worker's request goes straight onto the wire, saving the queue hop to an io
thread). Small messages travel packed, one frame each; the pskv-server thread holds its small
messages back during a burst and sends them packed together (see net.outbox). Messages from one
thread to one destination arrive in order. The inbox is also bound in-process, and a node's
messages to itself (with backups, a write to a range it heads) go there, not through TCP. With the
cluster's keys (net.auth) every TCP socket speaks CURVE: the ones that bind are servers, the ones that
connect clients, and the transport's `Guard` admits the cluster's key only. With `ipc` (a node's
PSKV_SHARED_MEMORY) the inbox and reply boxes also listen on files in this user's private directory
(net.private_ipc.private_dir), without CURVE, and messages to a peer that binds the same host and has such a
file go there (`url_of`); the coordinator is always reached over TCP. What is dropped here
(malformed packed frames, failed handshakes) is counted in `drops`. `close()` runs after all
sending threads have stopped; it closes every socket with LINGER 0 (sockets to the coordinator
linger briefly so a final BYE is delivered).
Assumes: dict operations are atomic under the GIL.
"""

from __future__ import annotations

import logging
import random
import threading

import zmq

from ..config import zmq_url
from ..errors import TransportError
from .auth import ClusterKeys, Guard, Handshakes
from .drops import Drops
from .outbox import Outbox
from .private_ipc import bind_private, forget, ipc_file, leave, private_dir
from .replybox import ReplyBox, Unpacker, recv_all, unlink, waiting
from .wire import COORDINATOR

log = logging.getLogger(__name__)
_MAX_BOXES = 256  # reply boxes per node at most (one per thread that waits); later threads use the inbox
HOLD_BYTES = 4096  # a message this small may be held back to leave packed with others (see hold_all)
_HOLD_MESSAGES = 64  # a packed frame carries at most this many held messages ...
_HOLD_TOTAL = 256 << 10  # ... and bytes
_TERM_WAIT = 5.0  # seconds close() waits for the ZeroMQ context to terminate


class _Local(threading.local):
    """A thread's sockets and state (attribute defaults: reading a missing attribute of a plain
    threading.local raises inside getattr, a microsecond per message)."""

    outboxes: dict | None = None  # rank or (rank, port) -> Outbox
    box: ReplyBox | None = None
    hold_all = False


class Transport:
    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        port: int = 0,
        send_timeout: float = 10.0,
        drop_rate: float = 0.0,
        linger: float = 0.0,
        context: zmq.Context | None = None,
        keys: ClusterKeys | None = None,
        ipc: bool = False,
    ) -> None:
        self._ctx = context or zmq.Context()
        self.keys = keys  # the cluster's CURVE keys (net.auth); None: unauthenticated
        self._own_ctx = context is None
        self._addresses: dict[int, str] = {}  # rank (or COORDINATOR) -> zmq url
        self._hosts: dict[int, tuple[str, int]] = {}  # rank -> (host, port) as announced
        self._ipc_dir = private_dir(host) if ipc else None  # this user's directory of ipc files for `host`
        self._ipc = None  # the inbox's ipc file
        self._local = _Local()  # .outboxes, .box, .hold_all of the calling thread
        self._all: list[Outbox] = []  # every outbox made, for close(); appended under _lock
        self._boxes: list[ReplyBox] = []  # every reply box made, for close(); appended under _lock
        self._lock = threading.Lock()  # guards _all and _closed
        self._closed = False
        self._send_timeout_ms = int(send_timeout * 1000)
        self._linger_ms = int(linger * 1000)  # the coordinator lingers so its last words arrive
        self._drop_rate = drop_rate  # test only (PSKV_TEST_DROP_RATE): drop data messages on send
        self.messages_sent = 0  # to other nodes, not the coordinator; approximate under threads (GIL-atomic +=)
        self.bytes_sent = 0  # (packed messages count one each, as if sent alone)
        self.messages_received = 0  # owner thread only: ZeroMQ messages (a packed frame counts once)
        self.bytes_received = 0  # owner thread only: their bytes
        self.drops = Drops(log, f"{host}:{port or '*'}")  # what is dropped here; the owner may rename it
        self._in = Unpacker(self.drops)  # the inbox's packed frames, owner thread only
        self._handshakes = Handshakes(keys, self.drops)  # the inbox's and the coordinator sockets' handshakes
        self._guard: Guard | None = None
        self._inbox = None
        try:
            if keys is not None:
                self._guard = Guard(self._ctx, keys, self.drops, str(port or id(self)))
            self._inbox = self._ctx.socket(zmq.PULL)
            self._inbox.setsockopt(zmq.LINGER, 0)
            self._inbox.setsockopt(zmq.RCVHWM, 0)
            if keys is not None:
                keys.server(self._inbox)
                self._handshakes.watch(self._inbox, "inbox")
            if ":" in host:
                self._inbox.setsockopt(zmq.IPV6, 1)
            if port:
                self._inbox.bind(zmq_url(host, port))
                self.port = port
            else:
                self.port = self._inbox.bind_to_random_port(zmq_url(host, 0).rsplit(":", 1)[0])
            self._inproc = f"inproc://pskv-inbox-{id(self)}"  # this node's messages to itself skip TCP
            self._inbox.bind(self._inproc)
            self._ipc = self._ipc_dir and ipc_file(self._ipc_dir, self.port)
            if self._ipc:  # last: it turns CURVE off for the endpoints bound after it
                self._ipc = bind_private(self._inbox, keys, self._ipc)
            elif not ipc:  # a file a crashed process left for our port would draw our peers' messages
                forget(host, self.port)
        except zmq.ZMQError as exc:
            self._close_auth()
            if self._inbox is not None:
                unlink(self._ipc)
                self._inbox.close(linger=0)
            self._terminate()
            raise TransportError(
                f"cannot bind the inbox on {host}:{port or '*'} ({exc}); check PSKV_HOST is an address of this machine"
            ) from exc
        self.host = host
        self.drops.what = self.address
        self._poller = zmq.Poller()
        self._poller.register(self._inbox, zmq.POLLIN)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def set_address(self, rank: int, address: str) -> None:
        """Where `rank` (or COORDINATOR) listens, as host:port."""
        host, _, port = address.rpartition(":")
        self._addresses[rank] = zmq_url(host.strip("[]"), int(port))
        self._hosts[rank] = (host.strip("[]"), int(port))

    def url_of(self, rank: int, port: int = 0) -> str:
        """Where a message to `rank`'s inbox (or with `port`, to that port of its host) goes: our own
        inbox in-process; ipc:// when ipc is on, the peer binds our host and its file exists (it made
        the file before it announced its address); else tcp://. Raises TransportError for an unknown rank."""
        url = self._addresses.get(rank)
        if url is None:
            raise TransportError(f"no address known for node {rank}; the cluster has not been joined yet")
        host, inbox = self._hosts.get(rank, ("", 0))
        if not port and host == self.host and inbox == self.port:
            return self._inproc
        if self._ipc_dir is not None and rank != COORDINATOR and host == self.host:
            path = ipc_file(self._ipc_dir, port or inbox)
            if path is not None and path.exists():
                return f"ipc://{path}"
        return f"{url.rsplit(':', 1)[0]}:{port}" if port else url

    def reply_box(self) -> ReplyBox | None:
        """The calling thread's reply box, made on first use; None once _MAX_BOXES exist (or closed)."""
        box = self._local.box
        if box is None:
            with self._lock:
                if self._closed or len(self._boxes) >= _MAX_BOXES:
                    return None
                try:
                    box = ReplyBox(self._ctx, self.host, self.keys, self.drops, self._ipc_dir)
                except zmq.ZMQError as exc:
                    log.warning("no reply box for this thread (%s); its replies go through the inbox", exc)
                    return None
                self._boxes.append(box)
            self._local.box = box
        return box

    def outbox(self, rank: int) -> Outbox:
        """The calling thread's outbox to `rank`'s inbox (made on first use), for `send(via=)`."""
        return self._outbox(rank)

    def send(self, rank: int, frames: list, *, copy: bool = False, port: int = 0, via: Outbox | None = None) -> None:
        """Send `frames` to `rank`'s inbox, or with `port`, to that port on `rank`'s host (a reply
        box). Thread-safe; blocks only if the peer's queue is full.

        A small message (<= outbox.PACK_BYTES) travels packed in one frame. A thread that called
        hold_all() holds its small data messages until its next flush(), which sends them packed
        together, one frame per destination. With copy=False the caller must not change the
        frames' buffers afterwards (pyzmq sends them in place, or they wait held as given).
        `via`: another thread's outbox to `rank` (`outbox()`), so that the message keeps its order
        among that thread's (a coalesced request sent when its predecessor's reply came, client.coalesce)."""
        if self._drop_rate and rank != COORDINATOR and random.random() < self._drop_rate:
            return
        box = via or self._outbox(rank, port)
        nbytes = sum(f.nbytes if hasattr(f, "nbytes") else len(f) for f in frames)
        try:
            with box.lock:
                if via is None and nbytes <= HOLD_BYTES and rank != COORDINATOR and self._local.hold_all:
                    box.hold(frames, nbytes, copy, max_messages=_HOLD_MESSAGES, max_bytes=_HOLD_TOTAL)
                else:
                    box.send(frames, nbytes, copy)
        except zmq.Again as exc:
            raise TransportError(
                f"sending to node {rank} timed out after {self._send_timeout_ms} ms; "
                "its queue is full, it is probably stuck or dead"
            ) from exc
        except zmq.ZMQError as exc:
            raise TransportError(f"sending to node {rank} failed: {exc}") from exc
        if rank != COORDINATOR:  # data traffic only: heartbeats would make the counts depend on timing
            self.messages_sent += 1
            self.bytes_sent += nbytes

    def sweep(self, deliver) -> None:
        """deliver(frames) for each message waiting in a reply box marked `swept` that no thread is
        receiving on now (pskv-server: the replies of requests nobody waits for yet, so they
        complete and nothing expires unread). Only boxes of threads that coalesce are marked: a sweep costs a few
        microseconds per box, and a thread that only makes blocking pulls waits for its replies."""
        for box in list(self._boxes):
            if box.swept and box.lock.acquire(False):
                try:  # deliver(frames) under the lock: a waiter that takes it next finds its Future done
                    frames = box.recv_nowait()
                    while frames is not None:
                        deliver(frames)
                        frames = box.recv_nowait()
                except zmq.ZMQError as exc:
                    log.warning("sweeping a reply box failed: %s", exc)
                finally:
                    box.lock.release()

    def hold_all(self) -> None:
        """From now on the calling thread holds its small data messages until it calls flush()
        (the pskv-server thread: the replies to one burst of requests leave packed, one frame per node)."""
        self._local.hold_all = True

    def flush(self) -> None:
        """Send every message the calling thread holds back."""
        for box in (self._local.outboxes or {}).values():
            if box.held:
                try:
                    with box.lock:
                        box.flush()
                except zmq.ZMQError as exc:
                    raise TransportError(f"sending held messages to node {box.rank} failed: {exc}") from exc

    @property
    def dropped(self) -> int:
        """Malformed packed frames received (inbox and reply boxes); each dropped whole."""
        return self._in.dropped + sum(box.dropped for box in list(self._boxes))

    @property
    def batches_sent(self) -> int:
        """Frames sent that carried more than one message."""
        return sum(box.batches for box in list(self._all))

    def send_once(self, address: str, frames: list) -> None:
        """Send one message to host:port on a socket made for it and closed at once (rare control replies)."""
        host, _, port = address.rpartition(":")
        sock = self._ctx.socket(zmq.PUSH)
        try:
            sock.setsockopt(zmq.SNDTIMEO, 1000)
            if self.keys is not None:
                self.keys.client(sock)
            sock.connect(zmq_url(host.strip("[]"), int(port)))
            sock.send_multipart(frames)
        except zmq.ZMQError as exc:
            log.warning("could not send to %s: %s", address, exc)
        finally:
            sock.close(linger=1000)

    def recv(self, timeout: float) -> list | None:
        """One message from the inbox as zmq.Frames, or None after `timeout` seconds. Owner thread only."""
        if self._in.queue:
            return self._in.queue.popleft()
        try:
            self._handshakes.adopt(self._poller)
            ready = dict(self._poller.poll(int(timeout * 1000)))
            if not ready:
                self.drops.flush()
                return None
            if len(ready) > 1 or self._inbox not in ready:  # a monitor: raises if the coordinator refused us
                self._handshakes.read(ready)
                if self._inbox not in ready:
                    return None
            frames = recv_all(self._inbox)
            self.messages_received += 1
            self.bytes_received += sum(len(f) for f in frames)
            return self._in.take(frames)
        except zmq.ZMQError as exc:
            raise TransportError(f"receiving on {self.address} failed: {exc}") from exc

    def recv_nowait(self) -> list | None:
        """One message from the inbox if one is waiting, else None (no poll). Owner thread only."""
        if self._in.queue:
            return self._in.queue.popleft()
        try:
            if not waiting(self._inbox):
                return None
            frames = recv_all(self._inbox, zmq.NOBLOCK)
        except zmq.Again:
            return None
        except zmq.ZMQError as exc:
            raise TransportError(f"receiving on {self.address} failed: {exc}") from exc
        self.messages_received += 1
        self.bytes_received += sum(len(f) for f in frames)
        return self._in.take(frames)

    def _outbox(self, rank: int, port: int = 0) -> Outbox:
        outboxes = self._local.outboxes
        if outboxes is None:
            outboxes = self._local.outboxes = {}
        where = (rank, port) if port else rank
        box = outboxes.get(where)
        if box is not None:
            if rank != COORDINATOR or box.url == self.url_of(rank):  # only the coordinator moves (takeover)
                return box
            box.flush()
        url = self.url_of(rank, port)
        with self._lock:
            if self._closed:
                raise TransportError("transport is closed")
            sock = self._ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 2000 if rank == COORDINATOR else self._linger_ms)
            sock.setsockopt(zmq.SNDTIMEO, self._send_timeout_ms)
            sock.setsockopt(zmq.SNDHWM, 100_000)
            if "[" in url:
                sock.setsockopt(zmq.IPV6, 1)
            if self.keys is not None and url.startswith("tcp:"):
                self.keys.client(sock)
            if rank == COORDINATOR:  # its refusal (another secret, or none) must reach the user as an error
                self._handshakes.watch(sock, self._addresses[rank].removeprefix("tcp://"))
            sock.connect(url)
            box = Outbox(sock, rank, url)
            self._all.append(box)
        outboxes[where] = box
        return box

    def close(self) -> None:
        """Close every socket. Idempotent. Call after the sending and receiving threads stopped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sockets, boxes = list(self._all), list(self._boxes)
        refused = self._handshakes.refused  # then what waits for the coordinator never leaves: no linger
        for outbox in sockets:
            outbox.sock.close(linger=0 if refused else None)
        for box in boxes:
            box.close()
        unlink(self._ipc)  # before the socket closes: we still hold its TCP port, so the file is ours
        assert self._inbox is not None  # (made in __init__, or __init__ raised)
        self._inbox.close(linger=0)
        if self._ipc_dir is not None:
            leave(self._ipc_dir)
        self._close_auth()
        self._terminate()

    def _close_auth(self) -> None:
        self._handshakes.close()
        if self._guard is not None:
            self._guard.stop()

    def _terminate(self) -> None:
        """Terminate our own context, bounded: libzmq can hang in term() despite LINGER 0 (libzmq
        #2586; seen here once, in a 1-node test's teardown), and close() must not hang a node's shutdown."""
        if not self._own_ctx:
            return
        left = [sock for sock in list(getattr(self._ctx, "_sockets", None) or ()) if not sock.closed]
        if left:  # a socket we lost track of would make term() wait for ever
            log.warning("%d ZeroMQ socket(s) still open when %s closed; closing them", len(left), self.address)
            for sock in left:
                sock.close(linger=0)
        term = threading.Thread(target=self._ctx.term, name="pskv-zmq-term", daemon=True)
        term.start()
        term.join(_TERM_WAIT)
        if term.is_alive():
            log.warning("the ZeroMQ context of %s did not terminate within %g s; left behind", self.address, _TERM_WAIT)

    def __repr__(self) -> str:
        return (
            f"<Transport {self.address} peers={len(self._addresses)} sent={self.messages_sent} "
            f"received={self.messages_received}>"
        )
