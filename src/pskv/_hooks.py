"""Test-only interleaving points: a test installs a function at a named point to force a race.

    with _hooks.installed("server.transfer", fn):   # fn(**context) runs each time the point is reached
        ...

Production code calls `reach(name, **context)` at a few places where a thread hands work to
another (the ownership check of a localize, a TRANSFER about to land). With nothing installed a
point costs one dict lookup. The registry is process-wide on purpose: the race it forces spans
threads of several nodes in one process, which is exactly where a constructor-passed hook could
not reach.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

points: dict[str, Callable[..., None]] = {}  # the data path tests it first: `if _hooks.points and _hooks.reach(...)`


def reach(name: str, **context) -> bool:
    """Run the hook at `name`, if any; True if it asks the caller to drop what it handles."""
    fn = points.get(name)
    return bool(fn(**context)) if fn is not None else False


@contextlib.contextmanager
def installed(name: str, fn: Callable[..., None]) -> Iterator[None]:
    """Run fn(**context) at point `name` inside the block (a true result: drop the message there)."""
    if name in points:
        raise RuntimeError(f"a hook is already installed at {name!r}")
    points[name] = fn
    try:
        yield
    finally:
        del points[name]
