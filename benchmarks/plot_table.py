"""Draw a table of benchmarks/RESULTS.md (or any markdown file) as a bar chart.

    python benchmarks/plot_table.py --section "Model-parallel MF" --column "test RMSE" --out mf.png
    python benchmarks/plot_table.py --section "Lasso on a STRADS" --column gap --log --out lasso.png
    python benchmarks/plot_table.py --section "Out-of-core" --list        # the section's tables and columns

Finds the first section whose heading contains --section (case-insensitive), takes its first table
that has --column (or the --table'th), and draws one bar per row: the row's first cell as the label,
the first number in the column's cell as the value (`1,038 MiB` -> 1038, `0.80x` -> 0.8, `6.5e-4`;
rows whose cell has no number, e.g. "diverged", are left out and named in the title). Needs
matplotlib (pip install 'pskv[plot]').
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def tables(text: str, section: str) -> list[list[list[str]]]:
    """The markdown tables (rows of cells, header first) of the first section whose heading has `section`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("#") and section.lower() in line.lower()), None)
    if start is None:
        raise SystemExit(f"no section heading contains {section!r}")
    level = len(lines[start]) - len(lines[start].lstrip("#"))
    found, current = [], []
    for line in lines[start + 1:]:
        if line.startswith("#") and len(line) - len(line.lstrip("#")) <= level:
            break
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):  # (the |---| rule)
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    return found


def number(cell: str) -> float | None:
    """The first number in a cell, or None."""
    found = _NUMBER.search(cell.replace("**", ""))
    return float(found.group(0).replace(",", "")) if found else None


def series(table: list[list[str]], column: str) -> tuple[list[str], list[float], list[str]]:
    """(labels, values, labels without a number) of `column` (a header that contains it)."""
    header = table[0]
    at = next((i for i, h in enumerate(header) if column.lower() in h.lower()), None)
    if at is None:
        raise SystemExit(f"no column {column!r} in {header}")
    labels, values, missing = [], [], []
    for row in table[1:]:
        value = number(row[at]) if at < len(row) else None
        (missing if value is None else labels).append(row[0].replace("**", ""))
        if value is not None:
            values.append(value)
    return labels, values, missing


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--file", type=Path, default=RESULTS, help="the markdown file (default benchmarks/RESULTS.md)")
    p.add_argument("--section", required=True, help="a part of the section's heading")
    p.add_argument("--column", help="a part of the column's header")
    p.add_argument("--table", type=int, default=None, help="which table of the section (0-based; default: the "
                                                            "first with the column)")
    p.add_argument("--log", action="store_true", help="a logarithmic value axis")
    p.add_argument("--list", action="store_true", help="print the section's tables' headers and stop")
    p.add_argument("--out", type=Path, default=Path("table.png"))
    args = p.parse_args(argv)
    found = tables(args.file.read_text(), args.section)
    if args.list or not args.column:
        for i, t in enumerate(found):
            print(f"table {i}: {' | '.join(t[0])}  ({len(t) - 1} rows)")
        return 0
    candidates = [found[args.table]] if args.table is not None else [
        t for t in found if any(args.column.lower() in h.lower() for h in t[0])]
    if not candidates:
        raise SystemExit(f"no table of section {args.section!r} has a column {args.column!r}")
    labels, values, missing = series(candidates[0], args.column)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_table: matplotlib is not installed; pip install 'pskv[plot]'", file=sys.stderr)
        return 2
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(labels) + 1.5))
    ax.barh(range(len(values)), values)
    ax.set_yticks(range(len(values)), labels)
    ax.invert_yaxis()
    header = next(h for h in candidates[0][0] if args.column.lower() in h.lower())
    ax.set_xlabel(header)
    if args.log:
        ax.set_xscale("log")
    title = args.section + (f" (no number: {', '.join(missing)})" if missing else "")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}: {len(values)} bars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
