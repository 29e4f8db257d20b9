"""The docs: every code block of README.md and docs/*.md runs (docs_blocks.py says how), the site builds
in strict mode (a broken link, anchor or API reference fails), the README stays short and the API
reference lists the whole public API."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from docs_blocks import NOT_RUN, OTHERS, ROOT, all_blocks, console_steps, example_holding, shown_line_pattern

BLOCKS = all_blocks()
RUNNABLE = list({(b.lang, b.text, b.run): b for b in reversed(BLOCKS)  # a block shown twice runs once
                 if b.lang in ("python", "bash", "console") and not b.not_run()
                 and not (b.lang == "python" and example_holding(b))}.values())[::-1]


def test_every_block_says_what_it_is():
    untagged = [b.id for b in BLOCKS if b.lang not in ("python", "bash", "console", "text")
                and not (b.lang == "" and b.page.name in OTHERS)]
    assert not untagged, f"blocks without python/bash/console/text: {untagged}"


def test_no_command_hides_in_a_text_block():
    hidden = [(b.id, line) for b in BLOCKS if b.lang in ("text", "") for line in b.text.splitlines()
              if re.match(r"^\s*(\$ |pskv (run|launch|demo|data|checkpoint|top|secret) |python |pip |make )", line)]
    assert not hidden, hidden


def test_each_not_run_entry_names_one_block():
    counts = {key: sum(1 for b in BLOCKS if b.page.name == key[0] and b.has_line(key[1])) for key in NOT_RUN}
    assert all(n == 1 for n in counts.values()), counts
    assert len(NOT_RUN) <= 8  # the list stays tiny


def test_python_blocks_of_examples_run_in_a_test():
    """A python block that is part of examples/X.py runs where X.py does: some test runs that file."""
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    held = {b.id: example_holding(b) for b in BLOCKS if b.lang == "python"}
    unrun = {i: p.name for i, p in held.items() if p is not None and f'"{p.name}"' not in tests}
    assert not unrun, unrun


def _env() -> dict[str, str]:
    keep = ("PSKV_DATA_DIR", "PSKV_LAPSE_TOY")  # where the user's data sets are (tests/conftest.py)
    env = {k: v for k, v in os.environ.items() if (k in keep or not k.startswith("PSKV_")) and k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["NO_MKDOCS_2_WARNING"] = "1"
    return env


def _workdir(tmp_path: Path) -> Path:
    for name in ("examples", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _bash(script: str, cwd: Path, timeout: float = 150) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs(block, tmp_path):
    cwd = _workdir(tmp_path)
    if block.lang == "python":
        (cwd / "block.py").write_text(block.text)
        done = _bash((block.run or "python {file}").format(file="block.py"), cwd)
        assert done.returncode == 0, f"{block.id}:\n{block.text}\n---\n{done.stdout[-4000:]}"
    elif block.lang == "bash":
        done = _bash(block.text, cwd)
        assert done.returncode == 0, f"{block.id}:\n{block.text}\n---\n{done.stdout[-4000:]}"
    else:
        for command, shown in console_steps(block):
            done = _bash(command, cwd)
            assert done.returncode == 0, f"{block.id}: {command}\n---\n{done.stdout[-4000:]}"
            printed = done.stdout.splitlines()
            for line in shown:
                assert any(shown_line_pattern(line).fullmatch(p.rstrip()) for p in printed), \
                    f"{block.id}: `{command}` printed no line like\n{line}\n---\n{done.stdout[-4000:]}"


def test_readme_is_at_most_300_lines():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def test_the_api_reference_lists_every_public_name():
    import pskv

    listed = set(re.findall(r"^::: pskv\.(\w+)$", (ROOT / "docs" / "reference.md").read_text(), re.M))
    assert set(pskv.__all__) <= listed, set(pskv.__all__) - listed


def test_every_page_is_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if f" {p.name}" not in nav]
    assert not missing, missing


@pytest.mark.timeout(180)
def test_the_site_builds_in_strict_mode(tmp_path):
    """`make docs`: a broken link or anchor, a page outside the nav or an API name griffe cannot find fails."""
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=170)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert "pull_async" in reference and "DataParallel" in reference  # docstrings, not just headings
