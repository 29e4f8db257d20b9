"""The apps' command lines: the common flags, their help, and the checks that run before any node starts.

    args = common.parser("mf", "matrix factorization", epochs=30, techniques=True, resumable=True)
    ...                                                      # the app's own flags
    def check(argv=None) -> argparse.Namespace:              # the app's opt-in: `pskv run mf` calls it first
        return common.arguments("mf", _parser(), argv, _check)

`pskv run APP` (the front process, before it starts a node) calls the app module's `check(argv)`
when it has one, and so does the app's own main() on each node: a mistake in the arguments, a
missing data path or a checkpoint that does not fit the flags then ends the run in one line,
`pskv run APP: error: ...` naming the flag, with exit status 2, before any node starts. A resumed
run that has nothing left to do says so and exits 0 (SystemExit either way).

Help: each option's default is shown once (the formatter adds `(default: X)` only where the help
text does not already speak of its default), and the common flags an app would ignore are not
added to its parser at all, so argparse refuses them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from ..errors import ConfigError, PskvError
from .metrics import STALL_TIMEOUT

SCHEMES = ("naive", "preloc", "pool", "onlylocal")  # --sampling: pskv.Sampling's schemes

Check = Callable[[argparse.Namespace], "str | None"]  # raises PskvError naming the flag; str: nothing to do


class Parser(argparse.ArgumentParser):
    """argparse, but a mistake is one line: `PROG: error: MESSAGE; see PROG --help`, exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}; see `{self.prog} --help`\n")


class HelpFormatter(argparse.HelpFormatter):
    """Adds `(default: X)` to an option's help unless the text already speaks of its default, or
    the default says nothing (None, False, an object without a short spelling)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        quiet = default is None or default is False or default is argparse.SUPPRESS  # (0 is a default to show)
        if "default" in text.lower() or quiet or not action.option_strings:
            return text
        if not isinstance(default, (str, int, float, Path)):
            return text
        return f"{text} (default: %(default)s)"


def parser(
    app: str, description: str, *, epochs: int = 10, techniques: bool = False, resumable: bool = False
) -> argparse.ArgumentParser:
    """An ArgumentParser for `pskv run APP` / `python -m pskv.apps.APP` with the common flags added:
    always --epochs, --seed, --plot, --log, --progress, --stall-timeout, --stats; with `techniques` the
    Lapse/NuPS/Petuum/AdaPM flags (--localize, --lease, --location-caches, --replicate, --intent,
    --ahead, --sampling, --consistency); with `resumable` --checkpoint-dir, --checkpoint-every, --keep, --resume and
    --backups (an app that takes them resumes at its epoch and trains a dead node's data)."""
    p = Parser(prog=f"pskv run {app}", description=description, formatter_class=HelpFormatter, allow_abbrev=False)
    g = p.add_argument_group("common")
    g.add_argument("--epochs", type=int, default=epochs, help="passes over the training data")
    g.add_argument("--seed", type=int, default=0, help="seed of data splits, initial values and order")
    g.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="plot the metrics against wall time (needs matplotlib: pip install 'pskv[plot]')",
    )
    g.add_argument("--log", type=Path, metavar="FILE.jsonl", help="write one JSON line per epoch")
    g.add_argument(
        "--progress",
        choices=["auto", "bar", "log", "lines", "json", "none"],
        default="auto",
        help="auto: a bar on a terminal (also under `pskv run`/`pskv launch` on one), else a log "
        "line every ~2 s (log, lines); json: machine-readable lines on stdout; none: no progress",
    )
    g.add_argument(
        "--stall-timeout",
        type=float,
        default=STALL_TIMEOUT,
        metavar="SECONDS",
        help="stop this node (status 3, with every thread's stack) when no worker finished a "
        "batch for this long; 0: never",
    )
    g.add_argument("--stats", action="store_true", help="print each node's counters (node.stats()) after training")
    if techniques:
        _techniques(p.add_argument_group("techniques (Lapse / NuPS / Petuum)"))
    if resumable:
        _checkpoints(g)
    return p


def _techniques(t) -> None:
    t.add_argument("--localize", action="store_true", help="relocate parameters to where they are used")
    t.add_argument(
        "--lease",
        type=float,
        default=None,
        metavar="SECONDS",
        help="pskv.Relocate(lease=): a node keeps keys it localized this long (0: always move; default: pskv's)",
    )
    t.add_argument(
        "--location-caches",
        choices=["on", "off"],
        default=None,
        help="pskv.Relocate(location_caches=) (default: on with --localize or --sampling preloc/pool)",
    )
    t.add_argument("--replicate", type=int, default=0, metavar="N", help="replicate the N hottest keys")
    t.add_argument(
        "--intent",
        action="store_true",
        help="signal each batch's keys --ahead batches early (pskv.data.Lookahead, AdaPM's intents): a "
        "key one node intends moves there ahead of use, a key several intend stays; needs no "
        "other technique flag",
    )
    t.add_argument("--ahead", type=int, default=4, metavar="K", help="--intent: batches read ahead")
    t.add_argument(
        "--sampling",
        type=_scheme,
        default=None,
        metavar="{" + ",".join(SCHEMES) + "}",
        help="sampling scheme for negative samples (default: naive, drawn by the app)",
    )
    t.add_argument(
        "--consistency",
        type=_consistency,
        default="async",
        metavar="{async,bsp,ssp:S}",
        help="consistency model: async, bulk synchronous, or stale synchronous with staleness S",
    )


def _checkpoints(g) -> None:
    g.add_argument(
        "--checkpoint-dir",
        type=Path,
        metavar="DIR",
        help="save a checkpoint of the tables (and the run's position) under DIR (node.checkpoint)",
    )
    g.add_argument("--checkpoint-every", type=int, default=1, metavar="N", help="epochs between checkpoints")
    g.add_argument("--keep", type=int, default=3, metavar="K", help="checkpoints kept in --checkpoint-dir")
    g.add_argument(
        "--resume",
        action="store_true",
        help="go on from the newest complete checkpoint in --checkpoint-dir (on any node count, at the "
        "epoch after it), or start at epoch 1 when it holds none yet; a run already at --epochs "
        "has nothing to do",
    )
    g.add_argument(
        "--backups",
        type=int,
        default=None,
        metavar="B",
        help="keep B backups of every key range (pskv.init(backups=B)); when a node dies, the others "
        "go on and take over its share of the data (default: PSKV_BACKUPS, else 0)",
    )


def _scheme(text: str) -> str:
    if text in SCHEMES:
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not {', '.join(SCHEMES[:-1])} or {SCHEMES[-1]}")


def _consistency(text: str) -> str:
    if text in ("async", "bsp") or (text.startswith("ssp:") and text[4:].isdigit()):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not async, bsp or ssp:S (S a staleness >= 0)")


# ---- before any node starts -------------------------------------------------------------------------------------
def arguments(
    app: str, p: argparse.ArgumentParser, argv: list[str] | None, check: Check | None = None
) -> argparse.Namespace:
    """Parse `argv` with `p`, then run `check(args)` (the app's checks of values, paths and an existing
    checkpoint). Returns the arguments. A mistake prints `pskv run APP: error: ...` (one line) and
    raises SystemExit(2); a check that finds nothing to do prints its line and raises SystemExit(0).
    Cheap: it reads no data set, only whether paths exist and a checkpoint's manifest."""
    args = p.parse_args(argv)
    try:
        done = check(args) if check is not None else None
    except PskvError as exc:
        print(f"pskv run {app}: error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    if done:
        print(f"pskv run {app}: {done}", file=sys.stderr, flush=True)
        raise SystemExit(0)
    return args


def at_least(args: argparse.Namespace, minimum: int, *flags: str) -> None:
    """ConfigError naming the first of `flags` (e.g. "--epochs") whose value is below `minimum`."""
    for flag in flags:
        value = getattr(args, flag.lstrip("-").replace("-", "_"))
        if value is not None and value < minimum:
            raise ConfigError(f"{flag} {value} must be >= {minimum}")


def newest_checkpoint(directory: Path | None) -> Path | None:
    """The newest complete checkpoint under `directory`, or None (no directory, or none complete yet)."""
    from ..checkpoint import format as fmt

    complete = [path for _, path, done in fmt.steps(directory) if done] if directory is not None else []
    return complete[-1] if complete else None


def check_resume(args: argparse.Namespace, compatible: Callable[[dict], str | None] | None = None) -> str | None:
    """With --resume: ConfigError without --checkpoint-dir, or when `compatible(tables)` (the newest
    checkpoint's manifest tables: name -> spec with dim, updater, ...) names a flag that does not fit
    it; the line to exit 0 with when it holds --epochs epochs already. None: go on (resumed, or no
    checkpoint yet: a fresh start). Without --resume: None."""
    if not getattr(args, "resume", False):
        return None
    if args.checkpoint_dir is None:
        raise ConfigError("--resume needs --checkpoint-dir DIR (where the run saves its checkpoints)")
    path = newest_checkpoint(args.checkpoint_dir)
    if path is None:
        return None
    from ..checkpoint import format as fmt

    manifest = fmt.read_manifest(path)  # CheckpointError names the file
    problem = compatible(manifest.get("tables", {})) if compatible is not None else None
    if problem:
        raise ConfigError(
            f"{problem} in {args.checkpoint_dir}/ (its newest checkpoint, {path.name}); resume with "
            "the flags it was trained with, or start afresh in another --checkpoint-dir"
        )
    epoch = int((manifest.get("extra") or {}).get("epoch", 0))
    if epoch >= args.epochs:
        return (
            f"nothing to do: {path} is after epoch {epoch} and --epochs is {args.epochs}; raise --epochs to "
            "train on from it"
        )
    return None


def dims(tables: dict, expected: dict[str, tuple[int, str]]) -> str | None:
    """A compatible() for check_resume: `expected` maps a table to (dim, "the flag that sets it, with its
    value"); the first table whose checkpoint dim differs gives "FLAG VALUE does not match THEIRS"
    (THEIRS the checkpoint's dim, in the flag's units when `expected` says `--flag N` and the dims
    differ by a constant: mf's item rows hold --rank factors plus a bias). A missing table: its name."""
    for name, (dim, flag) in expected.items():
        if name not in tables:
            return f"--checkpoint-dir does not match: no table {name!r} but {', '.join(sorted(tables)) or 'none'}"
        theirs = int(tables[name].get("dim", -1))
        if theirs != dim:
            value = flag.rpartition(" ")[2]
            ours = int(value) if value.lstrip("-").isdigit() else dim
            return f"{flag} does not match {theirs - (dim - ours)}"
    return None
