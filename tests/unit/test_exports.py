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
    "ConfigTypeError", "WaitTimeout",
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


def test_no_builtin_exception_raised_on_purpose():
    """Every error pskv raises on purpose is in the tree (a PskvError, which may also subclass the builtin)."""
    import re
    from pathlib import Path

    src = Path(pskv.__file__).parent
    bare = re.compile(r"raise (ValueError|TypeError|TimeoutError|RuntimeError|KeyError|IndexError)\(")
    found = [f"{path.relative_to(src)}:{n}: {line.strip()}" for path in sorted(src.rglob("*.py"))
             if path.name != "_hooks.py"  # test-only
             for n, line in enumerate(path.read_text().splitlines(), 1) if bare.search(line)]
    assert found == []


@pytest.mark.parametrize("make", [
    lambda: pskv.Normal(std=-1)._params(), lambda: pskv.SGD(lr=0), lambda: pskv.Sampling("nope"),
    lambda: pskv.Sampling([1.0, 2.0], scheme="nope"), lambda: pskv.updaters.get("rmsprop"),
])
def test_caller_mistakes_raise_config_error(make):
    """Bad option values raise ConfigError (also a ValueError)."""
    with pytest.raises(pskv.ConfigError):
        make()
