"""The import order of docs/design.md holds: no import cycle, no upward import, client and server apart.

Reads every module of src/pskv with `ast` (lazy imports inside functions and TYPE_CHECKING imports
count too) and checks each import against the layer order below, which docs/design.md shows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "pskv"
DESIGN = Path(__file__).resolve().parents[2] / "docs" / "design.md"

# lowest first; a unit may import only units of a lower rank (and itself)
LAYERS = [
    ["errors", "_hooks"],
    ["kernels", "tensors"],
    ["updaters", "options", "environments"],
    ["config"],
    ["net"],
    ["store"],
    ["placement"],
    ["membership"],
    ["consistency"],
    ["catalog"],
    ["checkpoint"],
    ["server", "client", "monitor"],  # siblings: never import each other
    ["node"],
    ["pskv"],  # the public API (__init__.py) re-exports the layers below
    ["launch", "launch_ray", "data", "schedule"],
    ["torch"],  # pskv.torch, the optional extra
    ["apps"],
    ["bench", "demo"],
    ["cli"],
    ["__main__"],
]
RANK = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (SRC.parent / rel).with_suffix(".py").exists() or (SRC.parent / rel / "__init__.py").exists()


def _imports(path: Path) -> set[str]:
    """The pskv modules `path` imports (anywhere in the file)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "pskv"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "pskv":
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if _is_module(sub) else target)
    return found


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "pskv"


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(SRC.rglob("*.py"))}


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in _graph()}
    assert units - set(RANK) == set(), "a new package or module: give it a place in LAYERS and docs/design.md"


def _upward(graph: dict[str, set[str]]) -> list[str]:
    upward = []
    for module, imports in graph.items():
        for target in imports:
            a, b = _unit(module), _unit(target)
            if a != b and RANK[b] >= RANK[a]:
                upward.append(f"{module} imports {target} ({a} is not above {b})")
    return upward


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def test_imports_only_go_down():
    assert _upward(_graph()) == []


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_nothing_below_node_imports_node():
    importers = sorted(m for m, imports in _graph().items() if "pskv.node" in imports and RANK[_unit(m)] < RANK["node"])
    assert importers == []


def test_design_doc_shows_this_order():
    text = DESIGN.read_text()
    m = re.search(r"Import order[^\n]*\n+```\n(.*?)```", text, re.S)
    assert m, "docs/design.md has an 'Import order' block"
    shown = [[u.strip() for u in line.split("|")] for line in m.group(1).strip().splitlines()[::-1]]
    assert shown == LAYERS


def test_the_checks_see_bad_imports():
    """The checks themselves, on made-up graphs: an upward import, a sibling import, a cycle."""
    assert _upward({"pskv.net.wire": {"pskv.node"}}) == ["pskv.net.wire imports pskv.node (net is not above node)"]
    assert len(_upward({"pskv.client.table": {"pskv.server.serve"}})) == 1
    assert _upward({"pskv.client.table": {"pskv.client.worker", "pskv.net.wire"}}) == []
    assert _cycles({"pskv.a": {"pskv.b"}, "pskv.b": {"pskv.c"}, "pskv.c": {"pskv.a"}}) == [["pskv.a", "pskv.b", "pskv.c"]]
    assert _cycles({"pskv.a": {"pskv.b"}, "pskv.b": set()}) == []
    found = _imports(SRC / "client" / "route.py")
    assert "pskv.net.wire" in found and "pskv.placement.route" in found
