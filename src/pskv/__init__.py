"""pskv: a parameter server for distributed machine learning.

Layout: the public API is exactly what this file re-exports; the packages (net, membership, store,
placement, consistency, server, client) and modules are internal. See README.md and docs/design.md.
"""

import sys as _sys

from . import updaters as updaters
from .client import filters as filters

_sys.modules[__name__ + ".filters"] = filters  # `from pskv.filters import Kkt` works as for pskv.updaters
from .errors import AggregationError as AggregationError
from .errors import Fenced as Fenced
from .errors import BarrierTimeout as BarrierTimeout
from .errors import ClosedError as ClosedError
from .errors import ConfigTypeError as ConfigTypeError
from .errors import ClusterError as ClusterError
from .errors import CollectiveStalled as CollectiveStalled
from .errors import ConsistencyError as ConsistencyError
from .errors import CoordinatorUnreachable as CoordinatorUnreachable
from .errors import DTypeError as DTypeError
from .errors import KeyOutOfRange as KeyOutOfRange
from .errors import NodeFailure as NodeFailure
from .errors import ProtocolError as ProtocolError
from .errors import PskvError as PskvError
from .errors import RemoteError as RemoteError
from .errors import RequestStalled as RequestStalled
from .errors import ShapeError as ShapeError
from .errors import TableError as TableError
from .errors import TableMismatch as TableMismatch
from .errors import TransportError as TransportError
from .errors import UnknownTable as UnknownTable
from .errors import WaitTimeout as WaitTimeout
from .errors import ConfigError as ConfigError
from .errors import CheckpointError as CheckpointError
from .checkpoint.format import CheckpointInfo as CheckpointInfo
from .checkpoint.format import CheckpointTable as CheckpointTable
from .checkpoint.format import load as load_checkpoint
from .options import Async as Async
from .options import BSP as BSP
from .options import Consistency as Consistency
from .options import SSP as SSP
from .net.future import Future as Future
from .net.future import wait as wait
from .node import Node as Node
from .node import init as init
from .options import Cache as Cache
from .options import NodeAggregate as NodeAggregate
from .options import Relocate as Relocate
from .options import Replicate as Replicate
from .options import Sampling as Sampling
from .store.spec import Constant as Constant
from .store.spec import Normal as Normal
from .store.spec import Uniform as Uniform
from .store.spec import Zeros as Zeros
from .updaters import Adagrad as Adagrad
from .updaters import Adam as Adam
from .updaters import SGD as SGD
from .client.table import Table as Table
from .client.worker import Worker as Worker

__version__ = "0.1.0"

__all__ = sorted([
    "Adagrad", "Adam", "AggregationError", "Async", "BSP", "BarrierTimeout", "Cache", "CheckpointError",
    "CheckpointInfo", "CheckpointTable", "ClosedError", "ClusterError",
    "CollectiveStalled", "ConfigError", "ConfigTypeError", "Consistency", "ConsistencyError", "Constant",
    "CoordinatorUnreachable", "DTypeError", "Fenced", "Future", "KeyOutOfRange", "Node", "NodeAggregate", "NodeFailure", "Normal",
    "ProtocolError", "PskvError", "Relocate", "RemoteError", "Replicate", "RequestStalled", "SGD", "SSP", "Sampling", "ShapeError",
    "Table", "TableError", "TableMismatch", "TransportError", "Uniform", "UnknownTable", "WaitTimeout",
    "Worker", "Zeros", "filters", "init", "load_checkpoint", "updaters", "wait",
])

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("pskv.") and not isinstance(_obj, type(updaters)):
        try:
            _obj.__module__ = "pskv"
        except (AttributeError, TypeError):
            pass
del _name, _obj, _sys
