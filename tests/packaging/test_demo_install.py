"""`make demo` installs the base and [plot] only: its install set, read from the Makefile and pyproject.toml,
sized from the distributions this venv holds (no second venv, no network)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _recipe(target: str) -> str:
    """The recipe lines of a Makefile target (`$(DEMO_STAMP):` and so on)."""
    text = (ROOT / "Makefile").read_text()
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", text, re.M)
    assert m, f"no rule {target} in the Makefile"
    return m.group(1)


def _closure(requirements: list[str]) -> dict[str, int]:
    """The distributions `pip install` of these requirements pulls, with their installed bytes."""
    sizes, todo = {}, [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if name in sizes or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        dist = metadata.distribution(req.name)
        sizes[name] = sum(f.size or 0 for f in dist.files or ())
        todo += [Requirement(r) for r in dist.requires or () if "extra ==" not in r]
    return sizes


def test_make_demo_installs_the_base_and_plot_only():
    assert re.findall(r"pip install --quiet -e '\.\[([^\]]*)\]'", _recipe("$(DEMO_STAMP)")) == ["plot"]
    assert "$(DEMO_STAMP)" in re.search(r"^demo:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert re.findall(r"pip install --quiet -e '\.\[([^\]]*)\]'", _recipe("$(STAMP)")) == ["dev,torch"]


def test_the_demos_install_is_small_and_holds_no_torch_ray_or_mkdocs():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["plot"]
    sizes = _closure(wanted)
    assert {"numpy", "pyzmq", "numba", "tqdm", "matplotlib"} <= set(sizes)
    assert not {"torch", "ray", "mkdocs", "pytest"} & set(sizes), sorted(sizes)
    total = sum(sizes.values()) / 2**20
    assert total < 400, f"{total:.0f} MiB: " + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in sorted(sizes.items()))
