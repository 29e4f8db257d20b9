"""The public surface: pskv.__all__ is complete, sorted, and its classes say `pskv`, not `pskv.errors`."""

from __future__ import annotations

import inspect
import types

import pytest

import pskv

pytestmark = pytest.mark.timeout(60)

PUBLIC_CLASSES = [
    # errors
    "PskvError", "TableError", "UnknownTable", "KeyOutOfRange", "ShapeError", "DTypeError", "TableMismatch",
    "ClusterError", "NodeFailure", "BarrierTimeout", "CoordinatorUnreachable", "TransportError", "ProtocolError",
    "RemoteError", "ClosedError", "ConfigError", "AggregationError", "RequestStalled", "CollectiveStalled",
    # the API objects
    "Node", "Worker", "Table", "Future",
    # initialisers and updaters
    "Zeros", "Constant", "Normal", "Uniform", "SGD", "Adagrad", "Adam",
]


def test_all_names_exist():
    """Every name listed in pskv.__all__ is an attribute of the package."""
    missing = [name for name in pskv.__all__ if not hasattr(pskv, name)]
    assert missing == []


def test_all_is_sorted_without_duplicates():
    """__all__ is sorted and lists each name once."""
    assert list(pskv.__all__) == sorted(set(pskv.__all__))


@pytest.mark.parametrize("name", PUBLIC_CLASSES)
def test_public_class_module_is_pskv(name):
    """Public classes are listed in __all__ and report __module__ == 'pskv' (tracebacks say pskv.X)."""
    assert name in pskv.__all__
    obj = getattr(pskv, name)
    assert inspect.isclass(obj)
    assert obj.__module__ == "pskv"


@pytest.mark.parametrize("name", ["init", "wait"])
def test_public_function_module_is_pskv(name):
    """The public functions init() and wait() report __module__ == 'pskv'."""
    assert callable(getattr(pskv, name))
    assert getattr(pskv, name).__module__ == "pskv"


def test_errors_derive_from_pskverror():
    """Every exception class pskv exports is a PskvError."""
    errors = [getattr(pskv, n) for n in pskv.__all__
              if inspect.isclass(getattr(pskv, n)) and issubclass(getattr(pskv, n), BaseException)]
    assert errors and all(issubclass(e, pskv.PskvError) for e in errors)


def test_updaters_is_the_module():
    """pskv.updaters is re-exported as the submodule itself, untouched."""
    assert isinstance(pskv.updaters, types.ModuleType)
    assert pskv.updaters.__name__ == "pskv.updaters"


def test_version_is_a_string():
    """pskv.__version__ is a dotted version string."""
    assert isinstance(pskv.__version__, str) and pskv.__version__.count(".") >= 1
