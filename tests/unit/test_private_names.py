"""No module of src/pskv reads (or sets) another module's private names (docs/design.md §1, issue 34).

Reads every module with `ast` and fails on `x._name` where

  - `x` is not `self` or `cls`, nor a module imported from outside pskv (`os._exit`, documented
    stdlib API, is not ours to judge),
  - `_name` has one leading underscore (dunders are Python's protocol, not privacy), and
  - `_name` is not defined in the same file: a function, class, method or module name, an import,
    an argument, or an attribute set on `self`/`cls` there (`other._x` where this file's class
    defines `_x`, e.g. another instance of it, is the class reading its own name).

The exceptions, at most 5, are listed with their reasons in docs/design.md §1 ("Private names");
this test reads that list too, so the two cannot drift apart."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)  # (~2 s of CPU; wall time on a loaded 2-core machine: 20-60 s)

SRC = Path(__file__).resolve().parents[2] / "src" / "pskv"
DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"
MAX_EXCEPTIONS = 5


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _outside_modules(tree: ast.Module) -> set[str]:
    """Names bound in this file to modules imported from outside pskv (`import os`, `import numpy as np`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "pskv":
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] != "pskv":
            names |= {alias.asname or alias.name for alias in node.names}  # (may be modules: `from os import path`)
    return names


def _defined(tree: ast.Module) -> set[str]:
    """The names this file defines (see the module docstring)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) \
                and node.value.id in ("self", "cls"):
            names.add(node.attr)
    return names


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def uses(path: Path, root: Path = SRC) -> list[tuple[str, str, int]]:
    """(file relative to `root`, `x._name` as written, line) of each use of another module's private name."""
    tree = _tree(path)
    defined, outside = _defined(tree), _outside_modules(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr) or node.attr in defined:
            continue
        if isinstance(node.value, ast.Name) and (node.value.id in ("self", "cls") or node.value.id in outside):
            continue
        found.append((path.relative_to(root).as_posix(), f"{ast.unparse(node.value)}.{node.attr}", node.lineno))
    for node in ast.walk(tree):  # `from .mod import _name`: the same read, spelled as an import
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] == "pskv"):
            where = _package(path, node, root)
            for alias in node.names:
                if _private(alias.name) and not (where / alias.name).with_suffix(".py").exists() \
                        and not (where / alias.name).is_dir():  # (a private module, e.g. pskv._hooks, is one)
                    found.append((path.relative_to(root).as_posix(), f"{node.module or '.'}.{alias.name}",
                                  node.lineno))
    return found


def _package(path: Path, node: ast.ImportFrom, root: Path) -> Path:
    """The directory whose modules `from ... import` names (a module's file: its own path without .py)."""
    if node.level:
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
    else:
        base, node_module = root, (node.module or "").split(".", 1)
        return base.joinpath(*node_module[1].split(".")) if len(node_module) > 1 else base
    return base.joinpath(*node.module.split(".")) if node.module else base


def exceptions() -> dict[tuple[str, str], str]:
    """{(file, `x._name`): reason} from the table under "Private names" in docs/design.md."""
    text = DESIGN.read_text()
    section = text.split("**Private names.**", 1)[1].split("\n## ", 1)[0]  # (to the next section)
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \| (.+?) \|$", section, re.M)
    return {(file, use): reason for file, use, reason in rows}


def test_no_module_reads_another_modules_private_names():
    allowed = exceptions()
    found = [use for path in sorted(SRC.rglob("*.py")) for use in uses(path)]
    bad = [f"{file}:{line}: {use}" for file, use, line in found if (file, use) not in allowed]
    assert not bad, ("private names of other modules (make them public where another module needs them, or "
                     "list a justified exception in docs/design.md):\n" + "\n".join(bad))
    unused = sorted(set(allowed) - {(file, use) for file, use, _ in found})
    assert not unused, f"exceptions in docs/design.md that no module needs any more: {unused}"


def test_at_most_five_exceptions_each_with_a_reason():
    allowed = exceptions()
    assert len(allowed) <= MAX_EXCEPTIONS, sorted(allowed)
    assert all(len(reason.split()) >= 5 for reason in allowed.values()), allowed


def test_the_rule_catches_reads_and_writes_and_leaves_own_names_alone(tmp_path):
    """The checker itself: a read and a write of another object's private name count; its own
    class's names, `self`/`cls`, outside modules and dunders do not."""
    path = tmp_path / "probe.py"
    path.write_text("import os\n"
                    "class A:\n"
                    "    def __init__(self, other):\n"
                    "        self._mine = other._mine\n"      # defined here: fine
                    "        os._exit\n"                      # an outside module: fine
                    "        other.__dict__\n"                # a dunder: fine
                    "        other._theirs\n"                 # a read: caught
                    "        other._set = 1\n"               # a write: caught
                    "from .mod import _hidden, shown\n"      # an import of a private name: caught
                    "from . import _private_module\n")       # a private module: fine
    (tmp_path / "_private_module.py").write_text("")
    assert uses(path, tmp_path) == [("probe.py", "other._theirs", 7), ("probe.py", "other._set", 8),
                                    ("probe.py", "mod._hidden", 9)]


def test_headers_are_built_in_net_only():
    """The net contract (docs/design.md §1): every header that leaves a node is built by net.endpoint's
    Endpoint (net.wire derives the headers of a received message); no other module calls Header(...)."""
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        if path.relative_to(SRC).parts[0] == "net":
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)) and \
                    (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "Header":
                bad.append(f"{path.relative_to(SRC).as_posix()}:{node.lineno}")
    assert not bad, "headers built outside net/ (give net.endpoint.Endpoint a method for it):\n" + "\n".join(bad)
