"""The code blocks of README.md and docs/*.md, and how tests/cluster/test_docs.py runs each one.

A fenced block's language says what it is:
- `python`: a program. If its text is part of a file under examples/ (the example's test runs that
  file), that is where it runs; else the test runs it as a file, with `python FILE`, or under the
  command of an HTML comment `<!-- run: pskv launch -n 3 -- python {file} -->` on the line above.
- `bash`: commands, run as one `bash -euo pipefail` script in a fresh directory (examples/ and
  benchmarks/ linked into it, the venv's `pskv` and `python` first on PATH).
- `console`: `$ COMMAND` lines, each followed by what it prints; each command runs as under `bash`,
  and every line shown must be among what it printed, numbers aside (timings and errors vary).
- `text`: output, a file layout, a diagram: nothing to run, and no line of it may look like a
  command (`$ `, `pskv `, `python `), so that no command hides in one.
A block without a language counts as `text` in the pages that others own (design.md, the generated
compatibility.md) and is refused in the rest. NOT_RUN is the whole list of blocks that need what a
test cannot have, each with the reason.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OTHERS = {"design.md", "compatibility.md"}  # owned elsewhere: untagged blocks there are diagrams
COMMAND = re.compile(r"^\s*(\$ |pskv |python |\.venv/bin/)")

# (page, a line of the block) -> why no test runs it
NOT_RUN = {
    ("README.md", "make demo     # creates .venv"):
        "creates a venv and installs packages; tests/packaging/test_demo_install.py checks what `make demo` installs "
        "and tests/cluster/test_demo.py runs the demo",
    ("README.md", "pip install -e .                    # base"): "installs packages from the network",
    ("apps.md", "pskv run word2vec --nodes 2 --threads 2 -- --data head500 --compare-gensim"):
        "full-size training runs, minutes each; tests/cluster/test_app_*.py run every app on small data",
    ("launching.md", "srun -N 4 --ntasks-per-node 1 python train.py"):
        "needs SLURM, several machines, a Ray cluster or Kubernetes; tests/cluster/test_launchers.py emulates "
        "SLURM, torchrun, Ray and Kubernetes environments on one machine",
    ("launching.md", "#SBATCH --nodes=4 --ntasks-per-node=1 --cpus-per-task=8"): "needs a SLURM cluster",
    ("launching.md", "ranks = run_ray(train, 4, 0.1, address=\"auto\")"):
        "needs a running Ray cluster (address='auto'); tests/cluster/test_launchers.py runs run_ray on a local Ray",
    ("operations.md", "pskv top --metrics-port 9100"):
        "two terminals at once, a live view of a running cluster; tests/cluster/test_metrics.py runs pskv top",
    ("scaling.md", ".venv/bin/python benchmarks/bench_scaling.py --model-only"): "a benchmark, a minute",
}


@dataclasses.dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    run: str | None  # the `<!-- run: ... -->` command above it

    @property
    def id(self) -> str:
        return f"{self.page.name}:{self.line}"

    def has_line(self, part: str) -> bool:
        return any(part in line for line in self.text.splitlines())

    def not_run(self) -> str | None:
        return next((why for (page, line), why in NOT_RUN.items() if page == self.page.name and self.has_line(line)),
                    None)


def blocks(page: Path) -> list[Block]:
    found, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        start, indent = i, len(m.group(1))
        i += 1
        body = []
        while not lines[i].strip().startswith("```"):
            body.append(lines[i][indent:])
            i += 1
        above = lines[start - 1] if start else ""
        run = re.fullmatch(r"<!-- run: (.*) -->", above.strip())
        found.append(Block(page, start + 1, m.group(2), "\n".join(body) + "\n", run and run.group(1)))
        i += 1
    return found


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def _holds(text: str, excerpt: list[str]) -> bool:
    """Whether `excerpt`'s lines are consecutive lines of `text`, all indented alike (an excerpt of an
    indented part may be shown dedented)."""
    lines = text.splitlines()
    for i in range(len(lines) - len(excerpt) + 1):
        if excerpt[0] and lines[i].endswith(excerpt[0]):
            indent = lines[i][:len(lines[i]) - len(excerpt[0])]
            if not indent.strip() and all(lines[i + k] == (indent + e if e else "") or (not e and not lines[i + k].strip())
                                          for k, e in enumerate(excerpt)):
                return True
    return False


def example_holding(block: Block) -> Path | None:
    """The file of examples/ that holds this python block, if any."""
    excerpt = block.text.strip("\n").splitlines()
    return next((p for p in sorted((ROOT / "examples").glob("*.py")) if _holds(p.read_text(), excerpt)), None)


def console_steps(block: Block) -> list[tuple[str, list[str]]]:
    """A console block as (command, the lines shown after it)."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif line.strip():
            assert steps, f"{block.id}: output before the first `$ ` command"
            steps[-1][1].append(line)
    return steps


def shown_line_pattern(line: str) -> re.Pattern:
    """A shown output line as a pattern: each number may differ. A `[launcher] ...` line stands for
    whatever line the launcher prints at start (its wording belongs to pskv.launch)."""
    if line.startswith("[launcher]"):
        return re.compile(r"\[launcher\] .*")
    parts = re.split(r"\d+(?:[.,]\d+)*", line.rstrip())
    return re.compile(r"\d+(?:[.,]\d+)*".join(re.escape(p) for p in parts))
