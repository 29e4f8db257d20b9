"""pskv: a parameter server for distributed machine learning.

Layout: the public API is exactly what this file re-exports; the packages (net, membership, store,
placement, consistency, server, client) and modules are internal. See README.md and docs/design.md.
"""

import sys as _sys

from . import updaters as updaters
from .checkpoint.format import (
    CheckpointInfo as CheckpointInfo,
    CheckpointTable as CheckpointTable,
    load as load_checkpoint,
)
from .client import filters as filters
from .client.table import Table as Table
from .client.worker import Worker as Worker
from .errors import (
    AggregationError as AggregationError,
    BarrierTimeout as BarrierTimeout,
    CheckpointError as CheckpointError,
    ClosedError as ClosedError,
    ClusterError as ClusterError,
    CollectiveStalled as CollectiveStalled,
    ConfigError as ConfigError,
    ConfigTypeError as ConfigTypeError,
    ConsistencyError as ConsistencyError,
    CoordinatorUnreachable as CoordinatorUnreachable,
    DTypeError as DTypeError,
    Fenced as Fenced,
    KeyOutOfRange as KeyOutOfRange,
    NodeFailure as NodeFailure,
    ProtocolError as ProtocolError,
    PskvError as PskvError,
    RemoteError as RemoteError,
    RequestStalled as RequestStalled,
    ShapeError as ShapeError,
    TableError as TableError,
    TableMismatch as TableMismatch,
    TransportError as TransportError,
    UnknownTable as UnknownTable,
    WaitTimeout as WaitTimeout,
)
from .net.future import Future as Future, wait as wait
from .node import Node as Node, init as init
from .options import (
    BSP as BSP,
    SSP as SSP,
    Async as Async,
    Cache as Cache,
    Consistency as Consistency,
    NodeAggregate as NodeAggregate,
    Relocate as Relocate,
    Replicate as Replicate,
    Sampling as Sampling,
)
from .store.spec import Constant as Constant, Normal as Normal, Uniform as Uniform, Zeros as Zeros
from .updaters import SGD as SGD, Adagrad as Adagrad, Adam as Adam

_sys.modules[__name__ + ".filters"] = filters  # `from pskv.filters import Kkt` works as for pskv.updaters

__version__ = "0.1.0"

__all__ = [  # sorted() order: tests/unit/test_exports.py
    "Adagrad",
    "Adam",
    "AggregationError",
    "Async",
    "BSP",
    "BarrierTimeout",
    "Cache",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointTable",
    "ClosedError",
    "ClusterError",
    "CollectiveStalled",
    "ConfigError",
    "ConfigTypeError",
    "Consistency",
    "ConsistencyError",
    "Constant",
    "CoordinatorUnreachable",
    "DTypeError",
    "Fenced",
    "Future",
    "KeyOutOfRange",
    "Node",
    "NodeAggregate",
    "NodeFailure",
    "Normal",
    "ProtocolError",
    "PskvError",
    "Relocate",
    "RemoteError",
    "Replicate",
    "RequestStalled",
    "SGD",
    "SSP",
    "Sampling",
    "ShapeError",
    "Table",
    "TableError",
    "TableMismatch",
    "TransportError",
    "Uniform",
    "UnknownTable",
    "WaitTimeout",
    "Worker",
    "Zeros",
    "filters",
    "init",
    "load_checkpoint",
    "updaters",
    "wait",
]

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("pskv.") and not isinstance(_obj, type(updaters)):
        try:
            _obj.__module__ = "pskv"
        except (AttributeError, TypeError):
            pass
del _name, _obj, _sys
