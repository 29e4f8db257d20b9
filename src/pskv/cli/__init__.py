"""The `pskv` command: argparse into launch/run/data/demo/bench; no logic of its own.

Try it: `pskv launch -n 2 -- python -c "import os; print(os.environ['PSKV_RANK'])"`

`parser.py` builds the argparse tree, one function per subcommand; `commands.py` runs each.
"""

from __future__ import annotations

import sys

from ..errors import PskvError
from .parser import FORWARDED, build as _parser


def main(argv: list[str] | None = None) -> int:
    """Run `pskv ...` with `argv` (default sys.argv[1:]); return the exit status."""
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.subcommand not in FORWARDED:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return args.run(args, rest)
    except PskvError as exc:
        print(f"pskv {args.subcommand}: error: {exc}", file=sys.stderr)
        return 2
