"""pskv's apps: matrix factorization, knowledge-graph embeddings, word2vec, LeNet-5 on Fashion-MNIST, sparse
logistic regression, Lasso on a STRADS-style scheduler.

    pskv run mf --nodes 2 --threads 2 -- --data ml-100k --epochs 10
    pskv launch -n 2 --threads 2 -- python -m pskv.apps.mf --data ml-100k

Each app is a module `pskv.apps.NAME` with `main(argv=None) -> int` that runs on every node of a
cluster (or, alone, as a 1-node cluster). Their shared flags and helpers are in common.py.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

APPS = {  # name -> module
    "mf": "pskv.apps.mf",
    "kge": "pskv.apps.kge",
    "word2vec": "pskv.apps.word2vec",
    "lr": "pskv.apps.lr",
    "lasso": "pskv.apps.lasso",
    "mnist": "pskv.apps.mnist",  # needs pskv[torch]
}


def run(
    app: str, argv: list[str], *, nodes: int | None = None, threads: int | None = None, verbose: bool = False
) -> int:
    """Run `app` with `argv`: on `nodes` new local nodes x `threads` (default 1 x 1), or, inside a
    cluster (PSKV_COORDINATOR set, as under `pskv launch`), as this node's part. Returns the status.

    Before it starts a node it calls the app module's `check(argv)` when it has one (common.arguments):
    a mistake in the app's arguments ends the run there, in one line, with status 2. `verbose`: the
    launcher also prints how to add nodes (pskv.launch.launch)."""
    from ..errors import PskvError

    if app not in APPS:
        raise PskvError(f"unknown app {app!r}; known: {', '.join(APPS)}")
    module = importlib.import_module(APPS[app])
    if os.environ.get("PSKV_COORDINATOR"):
        if nodes is not None or threads is not None:
            print(
                f"pskv run {app}: inside a cluster already; --nodes/--threads ignored (the launcher set them)",
                file=sys.stderr,
            )
        return module.main(argv)
    from ..launch import launch

    args = None
    if hasattr(module, "check"):  # the app's opt-in: its arguments, paths and checkpoint, before any node
        try:
            args = module.check(argv)
        except SystemExit as exc:  # (one line printed; 2: a mistake, 0: nothing to do)
            return exc.code if isinstance(exc.code, int) else 2
    orchestrate = getattr(module, "orchestrate", None)  # an app that runs several clusters
    status = orchestrate(argv, nodes, threads, launch) if orchestrate is not None else None
    if status is not None:
        return status
    if args is None:
        backups = argparse.ArgumentParser(add_help=False)
        backups.add_argument("--backups", type=int, default=None)
        args = backups.parse_known_args(argv)[0]
    # the launcher must know the backups too: with them the others go on when a node dies
    return launch(
        nodes or 1,
        [sys.executable, "-m", APPS[app], *argv],
        threads=threads or 1,
        backups=getattr(args, "backups", None),
        verbose=verbose,
    )
