"""benchmarks/plot_table.py: a RESULTS.md table drawn as bars (numbers parsed from the cells)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

_SPEC = importlib.util.spec_from_file_location("plot_table", Path(__file__).resolve().parents[2] / "benchmarks" /
                                               "plot_table.py")
plot_table = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(plot_table)

MD = """# Results

## Lasso, 2026-11-25

| run | gap | time |
| --- | --- | --- |
| strads | 6.5e-4 | 1,038 s |
| shotgun | **diverged** | |
| cyclic | 0.12 | 3 s |

## Next

| a | b |
| --- | --- |
| x | 1 |
"""


def test_a_section_table_column_becomes_bars(tmp_path):
    md = tmp_path / "r.md"
    md.write_text(MD)
    table, = plot_table.tables(MD, "lasso")
    assert plot_table.series(table, "time") == (["strads", "cyclic"], [1038.0, 3.0], ["shotgun"])
    assert plot_table.series(table, "gap") == (["strads", "cyclic"], [6.5e-4, 0.12], ["shotgun"])
    out = tmp_path / "g.png"
    assert plot_table.main(["--file", str(md), "--section", "Lasso", "--column", "gap", "--log", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="no column 'nope'"):
        plot_table.main(["--file", str(md), "--section", "Lasso", "--column", "nope", "--table", "0"])
