"""Transport: move multipart frames between nodes over ZeroMQ. The only module that touches zmq.

Each node binds one PULL socket (its inbox); every peer, and the coordinator, reaches it
through PUSH sockets. Requests and replies are both plain messages to a rank's inbox, as in
ps-lite's van: the receiving thread tells them apart by the header.

Threads and ownership: the inbox socket belongs to the one thread that calls `recv()` (the
node's pskv-server thread). Outgoing PUSH sockets are thread-local: every thread that calls
`send()` gets its own socket to each destination the first time it sends there, so no socket
is ever shared and no lock is held while sending (a worker's request goes straight onto the
wire, saving the queue hop to an io thread). Messages from one thread to one destination
arrive in order. `close()` runs after all sending threads have stopped; it closes every socket
with LINGER 0 (sockets to the coordinator linger briefly so a final BYE is delivered).
Assumes: dict operations are atomic under the GIL.
"""

from __future__ import annotations

import logging
import random
import threading

import zmq

from ..config import zmq_url
from ..errors import TransportError
from .wire import COORDINATOR

log = logging.getLogger(__name__)


class Transport:
    def __init__(self, host: str = "127.0.0.1", *, port: int = 0, send_timeout: float = 10.0,
                 drop_rate: float = 0.0, linger: float = 0.0, context: zmq.Context | None = None) -> None:
        self._ctx = context or zmq.Context()
        self._own_ctx = context is None
        self._addresses: dict[int, str] = {}  # rank (or COORDINATOR) -> zmq url
        self._local = threading.local()  # .sockets: dict[rank, zmq.Socket] of this thread
        self._all: list[zmq.Socket] = []  # every PUSH socket made, for close(); appended under _lock
        self._lock = threading.Lock()  # guards _all and _closed
        self._closed = False
        self._send_timeout_ms = int(send_timeout * 1000)
        self._linger_ms = int(linger * 1000)  # the coordinator lingers so its last words arrive
        self._drop_rate = drop_rate  # test only (PSKV_TEST_DROP_RATE): drop data messages on send
        self.messages_sent = 0  # to other nodes, not the coordinator; approximate under threads (GIL-atomic +=)
        self.bytes_sent = 0
        self.messages_received = 0  # owner thread only
        try:
            self._inbox = self._ctx.socket(zmq.PULL)
            self._inbox.setsockopt(zmq.LINGER, 0)
            self._inbox.setsockopt(zmq.RCVHWM, 0)
            if ":" in host:
                self._inbox.setsockopt(zmq.IPV6, 1)
            if port:
                self._inbox.bind(zmq_url(host, port))
                self.port = port
            else:
                self.port = self._inbox.bind_to_random_port(zmq_url(host, 0).rsplit(":", 1)[0])
        except zmq.ZMQError as exc:
            self._inbox.close(linger=0)
            self._terminate()
            raise TransportError(f"cannot bind the inbox on {host}:{port or '*'} ({exc}); "
                                 "check PSKV_HOST is an address of this machine") from exc
        self.host = host
        self._poller = zmq.Poller()
        self._poller.register(self._inbox, zmq.POLLIN)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def set_address(self, rank: int, address: str) -> None:
        """Where `rank` (or COORDINATOR) listens, as host:port."""
        host, _, port = address.rpartition(":")
        self._addresses[rank] = zmq_url(host.strip("[]"), int(port))

    def send(self, rank: int, frames: list, *, copy: bool = False) -> None:
        """Send `frames` to `rank`'s inbox. Thread-safe; blocks only if the peer's queue is full.

        With copy=False the caller must not change the frames' buffers afterwards (pyzmq sends
        them in place); small frames are copied anyway (zmq.COPY_THRESHOLD)."""
        if self._drop_rate and rank != COORDINATOR and random.random() < self._drop_rate:
            return
        sock = self._socket(rank)
        try:
            sock.send_multipart(frames, copy=copy)
        except zmq.Again as exc:
            raise TransportError(f"sending to node {rank} timed out after {self._send_timeout_ms} ms; "
                                 "its queue is full, it is probably stuck or dead") from exc
        except zmq.ZMQError as exc:
            raise TransportError(f"sending to node {rank} failed: {exc}") from exc
        if rank != COORDINATOR:  # data traffic only: heartbeats would make the counts depend on timing
            self.messages_sent += 1
            self.bytes_sent += sum(f.nbytes if hasattr(f, "nbytes") else len(f) for f in frames)

    def send_once(self, address: str, frames: list) -> None:
        """Send one message to host:port on a socket made for it and closed at once (rare control replies)."""
        host, _, port = address.rpartition(":")
        sock = self._ctx.socket(zmq.PUSH)
        try:
            sock.setsockopt(zmq.SNDTIMEO, 1000)
            sock.connect(zmq_url(host.strip("[]"), int(port)))
            sock.send_multipart(frames)
        except zmq.ZMQError as exc:
            log.warning("could not send to %s: %s", address, exc)
        finally:
            sock.close(linger=1000)

    def recv(self, timeout: float) -> list | None:
        """One message from the inbox as zmq.Frames, or None after `timeout` seconds. Owner thread only."""
        try:
            if not self._poller.poll(int(timeout * 1000)):
                return None
            frames = self._inbox.recv_multipart(copy=False)
            self.messages_received += 1
            return frames
        except zmq.ZMQError as exc:
            raise TransportError(f"receiving on {self.address} failed: {exc}") from exc

    def recv_nowait(self) -> list | None:
        """One message from the inbox if one is waiting, else None (no poll). Owner thread only."""
        try:
            frames = self._inbox.recv_multipart(zmq.NOBLOCK, copy=False)
        except zmq.Again:
            return None
        except zmq.ZMQError as exc:
            raise TransportError(f"receiving on {self.address} failed: {exc}") from exc
        self.messages_received += 1
        return frames

    def _socket(self, rank: int) -> zmq.Socket:
        sockets = getattr(self._local, "sockets", None)
        if sockets is None:
            sockets = self._local.sockets = {}
        sock = sockets.get(rank)
        if sock is not None:
            return sock
        url = self._addresses.get(rank)
        if url is None:
            raise TransportError(f"no address known for node {rank}; the cluster has not been joined yet")
        with self._lock:
            if self._closed:
                raise TransportError("transport is closed")
            sock = self._ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 2000 if rank == COORDINATOR else self._linger_ms)
            sock.setsockopt(zmq.SNDTIMEO, self._send_timeout_ms)
            sock.setsockopt(zmq.SNDHWM, 100_000)
            if "[" in url:
                sock.setsockopt(zmq.IPV6, 1)
            sock.connect(url)
            self._all.append(sock)
        sockets[rank] = sock
        return sock

    def close(self) -> None:
        """Close every socket. Idempotent. Call after the sending and receiving threads stopped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sockets = list(self._all)
        for sock in sockets:
            sock.close()
        self._inbox.close(linger=0)
        self._terminate()

    def _terminate(self) -> None:
        if self._own_ctx:
            self._ctx.term()

    def __repr__(self) -> str:
        return (f"<Transport {self.address} peers={len(self._addresses)} sent={self.messages_sent} "
                f"received={self.messages_received}>")
