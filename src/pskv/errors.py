"""The exception tree of pskv. Every error pskv raises on purpose is a PskvError.

```
PskvError
├── TableError
│   ├── UnknownTable(TableError, KeyError)        no table of that name was declared
│   ├── KeyOutOfRange(TableError, IndexError)     a key the table does not have
│   ├── ShapeError(TableError, ValueError)        keys/values of the wrong shape
│   ├── DTypeError(TableError, TypeError)         a dtype that cannot be cast safely
│   └── TableMismatch(TableError, ValueError)     nodes declared one table differently
├── ConfigError(PskvError, ValueError)            a malformed PSKV_* variable or option value
│   └── ConfigTypeError(ConfigError, TypeError)   an option of the wrong type (init=, updater=, ...)
├── ConsistencyError(PskvError, ValueError)       unknown consistency model, clock() misused
├── AggregationError(PskvError, RuntimeError)     NodeAggregate table: pushed twice in a round, pulled twice
├── ClusterError
│   ├── NodeFailure        the cluster stopped: a peer died, or a node aborted; .node_id .address
│   │   ├── RequestStalled     a request made no progress for request_timeout; .request .destinations
│   │   └── CollectiveStalled  a table()/barrier some node never joined; .missing (node ids)
│   ├── BarrierTimeout     a barrier did not complete within its timeout; .missing (node ids)
│   └── CoordinatorUnreachable
├── TransportError         ZeroMQ failed; __cause__ is the zmq.ZMQError
├── ProtocolError          a peer sent frames we cannot decode (version skew, garbage)
├── RemoteError            a server answered our request with an error; .node_id
├── ClosedError(PskvError, RuntimeError)   *your* code closed this Node/Worker, then used it
└── WaitTimeout(PskvError, TimeoutError)   a timeout you passed ran out (Future.wait, pskv.wait, a pull)
```

Classify by who caused it: ClosedError means the caller closed it (do not retry), NodeFailure
means something outside broke it. After the first failure of a node (a peer died, one of its own
worker threads raised, a request or collective stalled) every later call on that node raises a
fresh NodeFailure (or the subclass it first failed with) whose `__cause__` is the original error,
whatever the timing. Messages say what happened with the actual values, then
what pskv did and what to do next; one sentence, lower-case start, no final period.
"""

from __future__ import annotations


class PskvError(Exception):
    """Base class of every error pskv raises on purpose."""


class TableError(PskvError):
    """A table was used wrongly: unknown name, bad keys, bad shape or dtype, mismatch."""


class UnknownTable(TableError, KeyError):
    """No table of this name was declared on this node."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the sentence
        return str(self.args[0]) if self.args else ""


class KeyOutOfRange(TableError, IndexError):
    """A key is not a row of the table."""


class ShapeError(TableError, ValueError):
    """Keys or values have the wrong shape."""


class DTypeError(TableError, TypeError):
    """Keys or values have a dtype that cannot be cast safely."""


class TableMismatch(TableError, ValueError):
    """Nodes declared the same table differently (rows, dim, dtype, updater, order)."""


class ClusterError(PskvError):
    """Something about the cluster broke: a node, a barrier, the coordinator."""


class NodeFailure(ClusterError):
    """A peer node died or stopped answering. `.node_id` names it (-1: the coordinator)."""

    def __init__(self, message: str, node_id: int = -1, address: str = "") -> None:
        super().__init__(message)
        self.node_id = node_id
        self.address = address


class Fenced(NodeFailure):
    """This node was taken out of the cluster (it was silent past failure_timeout, e.g. stopped, and
    the others went on without it): it must not serve or change anything any more."""


class RequestStalled(NodeFailure):
    """A request made no progress for `request_timeout` seconds. `.request` describes it (table,
    kind, keys), `.destinations` the nodes it was sent to; `.node_id` is the first of those."""

    def __init__(
        self,
        message: str,
        node_id: int = -1,
        address: str = "",
        request: str = "",
        destinations: list[int] | None = None,
    ) -> None:
        super().__init__(message, node_id, address)
        self.request = request
        self.destinations = list(destinations or [])


class CollectiveStalled(NodeFailure):
    """A collective (table declaration, barrier) that some nodes never joined within
    `collective_timeout`, or that a node left without joining. Raised on every node; `.missing`
    lists the nodes that did not join, `.node_id` is the first of them."""

    def __init__(self, message: str, missing: list[int] | None = None) -> None:
        missing = list(missing or [])
        super().__init__(message, missing[0] if missing else -1)
        self.missing = missing


class BarrierTimeout(ClusterError):
    """A barrier did not complete in time. `.missing` lists the node ranks that never arrived."""

    def __init__(self, message: str, missing: list[int] | None = None) -> None:
        super().__init__(message)
        self.missing = list(missing or [])


class CoordinatorUnreachable(ClusterError):
    """The coordinator did not answer in time (rendezvous, or heartbeats stopped)."""


class TransportError(PskvError):
    """ZeroMQ failed; `__cause__` is the zmq.ZMQError."""


class ProtocolError(PskvError):
    """Frames that cannot be decoded: garbage, truncation, version skew, wrong cluster."""


class RemoteError(PskvError):
    """A server answered a request with an error. `.node_id` is the server's rank."""

    def __init__(self, message: str, node_id: int = -1) -> None:
        super().__init__(message)
        self.node_id = node_id


class ClosedError(PskvError, RuntimeError):
    """This Node or Worker was closed by your code and then used."""


class ConfigError(PskvError, ValueError):
    """A PSKV_* variable or an option value (updater, init, sampling, ...) is malformed."""


class ConfigTypeError(ConfigError, TypeError):
    """An option has the wrong type (e.g. init=object(): a number or a pskv initializer is needed)."""


class WaitTimeout(PskvError, TimeoutError):
    """A timeout the caller passed ran out before the wait ended (the request itself goes on)."""


class ConsistencyError(PskvError, ValueError):
    """A consistency model pskv does not know, or a clock used where there is none."""


class AggregationError(PskvError, RuntimeError):
    """A thread broke the rounds of an aggregated table: it pushed a key twice in one round, or
    pulled a key while its earlier pull of it was outstanding (pskv.client.aggregate)."""


class CheckpointError(PskvError):
    """A checkpoint cannot be written or read: a missing, truncated or corrupted file, a manifest of
    another format version, a path that is not a checkpoint, a directory a node cannot write."""
