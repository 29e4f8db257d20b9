"""The apps benchmark: MF, KGE and word2vec, each with and without pskv, in one run.

    .venv/bin/python benchmarks/bench_apps.py                      # every app, full
    .venv/bin/python benchmarks/bench_apps.py --quick --apps mf    # fewer variants, one app
    .venv/bin/python benchmarks/bench_apps.py --markdown           # also print Markdown tables

Each app's section is benchmarks/bench_app_APP.py with `run(args) -> list[dict]` (args has
`quick`); a section whose file is missing is skipped with a note. Rows are printed as JSON lines
as each section finishes, then (with --markdown) one table per app.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

APPS = ("mf", "kge", "word2vec")
HERE = Path(__file__).resolve().parent


def section(app: str):
    """The module benchmarks/bench_app_APP.py, or None if it is not there."""
    path = HERE / f"bench_app_{app}.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"bench_app_{app}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def markdown(rows: list[dict]) -> str:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    lines += ["| " + " | ".join("" if row.get(k) is None else str(row.get(k)) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer variants and data sets per app")
    p.add_argument("--apps", default=",".join(APPS), help=f"comma-separated, of {', '.join(APPS)}")
    p.add_argument("--markdown", action="store_true", help="print one Markdown table per app at the end")
    args = p.parse_args(argv)
    tables = {}
    for app in args.apps.split(","):
        module = section(app)
        if module is None:
            print(f"# {app}: skipped, benchmarks/bench_app_{app}.py is not there", flush=True)
            continue
        start = time.monotonic()
        rows = module.run(argparse.Namespace(quick=args.quick, markdown=False))
        for row in rows:
            print(json.dumps(row), flush=True)
        print(f"# {app}: {len(rows)} rows in {time.monotonic() - start:.0f} s", flush=True)
        tables[app] = rows
    if args.markdown:
        for app, rows in tables.items():
            print(f"\n### {app}\n\n{markdown(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
