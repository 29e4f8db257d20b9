"""The README's quickstart is examples/quickstart.py, and it runs on 1 node and under `pskv launch`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "examples" / "quickstart.py"


def test_readme_quickstart_is_the_example_file():
    """The first python block of README.md is the body of examples/quickstart.py, verbatim."""
    block = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    assert block.strip() in EXAMPLE.read_text()


@pytest.mark.parametrize("launch", [False, True])
def test_quickstart_runs_and_learns(launch):
    """The quickstart runs as written and ends closer to the true weights than it started."""
    cmd = [sys.executable, str(EXAMPLE)]
    if launch:
        cmd = [sys.executable, "-m", "pskv", "launch", "-n", "2", "--threads", "2", "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"mean \|w - w_true\| = ([\d.]+) \(started at ([\d.]+)\)", proc.stdout)
    assert m, proc.stdout
    assert float(m.group(1)) < 0.6 * float(m.group(2))
    assert ("[node 0]" in proc.stdout) == launch
