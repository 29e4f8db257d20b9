"""What each `pskv` subcommand does, given its parsed arguments (cli.parser builds them): each `run(args,
rest)` returns the exit status. The work is the layers' below: launch, apps, data, checkpoint, monitor.
"""

from __future__ import annotations

import argparse
import importlib


def _launcher_environ(args: argparse.Namespace, *, hosts: bool) -> None:
    """What --insecure, --no-shared-memory (and for `pskv run`, whose launch() call is the app's,
    --hosts and --link) ask, as the variables the launcher and the nodes read."""
    import os

    if args.insecure:
        os.environ["PSKV_INSECURE"] = "1"  # (read where the launcher makes the secret)
    if args.no_shared_memory:
        os.environ["PSKV_SHARED_MEMORY"] = "0"  # (the nodes inherit it)
    if hosts and args.hosts is not None:
        os.environ["PSKV_HOSTS"] = str(args.hosts)  # (read by launch.launch)
    if hosts and args.link is not None:
        os.environ["PSKV_LINK"] = args.link


def evaluate(args: argparse.Namespace, rest: list[str]) -> int:
    from ..apps.mnist import evaluate_main

    return evaluate_main(rest)


def launch(args: argparse.Namespace, rest: list[str]) -> int:
    from ..launch import launch as start

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    _launcher_environ(args, hosts=False)
    if args.ray:
        return _launch_ray(args, command)
    if args.address is not None:
        from ..errors import ConfigError

        raise ConfigError("--address names a Ray cluster; it needs --ray")
    return start(
        args.nodes,
        command,
        threads=args.threads,
        hostfile=args.hostfile,
        coordinator_host=args.coordinator_host,
        backups=args.backups,
        restore=args.restore,
        join=args.join,
        metrics=args.metrics,
        emulated_hosts=args.hosts,
        link=args.link,
        verbose=args.verbose,
    )


def _launch_ray(args: argparse.Namespace, command: list[str]) -> int:
    from ..errors import ConfigError
    from ..launch_ray import launch_ray

    for flag, value in (
        ("--hostfile", args.hostfile),
        ("--join", args.join),
        ("--coordinator-host", args.coordinator_host),
        ("--hosts", args.hosts),
        ("--link", args.link),
    ):
        if value is not None:
            raise ConfigError(f"{flag} does not apply with --ray: Ray places the nodes and node 0 runs the coordinator")
    settings = {"backups": args.backups, "restore": args.restore, "metrics_port": getattr(args, "metrics", None)}
    return launch_ray(
        args.nodes,
        command,
        address=args.address,
        threads=args.threads,
        **{k: v for k, v in settings.items() if v is not None},
    )


def top(args: argparse.Namespace, rest: list[str]) -> int:
    from ..errors import ConfigError
    from ..monitor import top as watch

    if args.nodes is not None and args.metrics_port is None:
        raise ConfigError("pskv top: --nodes N counts the ports from --metrics-port P; give both, or neither")
    urls = watch.find(args.metrics_port, args.nodes, args.host, args.urls)
    if not urls:
        raise ConfigError(
            "pskv top found no running cluster with metrics on this machine; start one with "
            "`pskv launch --metrics P` (or `PSKV_METRICS_PORT=P pskv run ...`), or give "
            "--metrics-port P [--nodes N] [--host H] or the nodes' URLs"
        )
    return watch.run(urls, once=args.once, interval=args.interval)


def run_app(args: argparse.Namespace, rest: list[str]) -> int:
    from ..apps import APPS, run

    if args.help or args.app is None:
        if args.app not in APPS:  # `pskv run --help`, or an unknown app: the command's own help
            args.run_parser.print_help()
            print(f"\napps: {', '.join(APPS)}; `pskv run APP --help` shows an app's options")
            return 0 if args.app is None else 2
        print(
            f"pskv run {args.app} [-n/--nodes N] [--threads T] [--] [APP ARGS ...]: N local nodes x T worker "
            "threads (default 1 x 1; ignored under `pskv launch`), then the app's arguments:\n",
            flush=True,
        )
        try:
            importlib.import_module(APPS[args.app]).main(["--help"])
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0
    _launcher_environ(args, hosts=True)
    return run(
        args.app, rest[1:] if rest[:1] == ["--"] else rest, nodes=args.nodes, threads=args.threads, verbose=args.verbose
    )


def data_list(args: argparse.Namespace, rest: list[str]) -> int:
    from ..data.fetch import describe

    print("\n".join(describe()))
    return 0


def data_fetch(args: argparse.Namespace, rest: list[str]) -> int:
    from ..data.fetch import fetch

    for name in args.names:
        print(fetch(name, quiet=args.quiet))
    return 0


def data_convert(args: argparse.Namespace, rest: list[str]) -> int:
    from ..data.sparse import convert

    data = convert(args.source, args.out, quiet=args.quiet, real_labels=args.real_labels)
    keys = len(data.distinct_keys())
    labels = (
        f"targets {float(data.labels.min()):g}..{float(data.labels.max()):g}"
        if args.real_labels
        else f"{float(data.labels.mean()):.1%} positive"
    )
    print(f"{args.out}: {data.rows:,} examples, {data.nnz:,} non-zeros, {keys:,} distinct features, {labels}")
    return 0


def checkpoint_list(args: argparse.Namespace, rest: list[str]) -> int:
    import json
    import time

    from ..checkpoint import format as fmt

    found = fmt.steps(args.directory)
    if not found:
        print(f"no checkpoints under {args.directory}")
        return 0
    for step, path, complete in found:
        if not complete:
            print(f"{path}  incomplete (no manifest: a node stopped while writing it; never restored)")
            continue
        try:
            manifest = json.loads((path / fmt.MANIFEST).read_text())
            age = time.time() - float(manifest["created"])
            size = sum(m["bytes"] for m in manifest["files"].values())
            extra = manifest.get("extra") or {}
            epoch = f"epoch {extra['epoch']} (step {step})" if "epoch" in extra else f"step {step}"
            print(
                f"{path}  {epoch}, {manifest['nodes']} node(s), tables {', '.join(sorted(manifest['tables']))}, "
                f"{size / 2**20:.1f} MiB, {age / 60:.1f} min old"
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"{path}  unreadable manifest ({exc})")
    return 0


def checkpoint_inspect(args: argparse.Namespace, rest: list[str]) -> int:
    from ..checkpoint import format as fmt

    print("\n".join(fmt.describe(args.path)))
    return 0


def forward(args: argparse.Namespace, rest: list[str]) -> int:
    import importlib

    # (import_module looks in sys.modules first: `from . import bench` took a package attribute
    # that an earlier import had set, past a test's stand-in)
    module = importlib.import_module(f"pskv.{'demo' if args.subcommand == 'demo' else 'bench'}")
    return module.main(rest)


def secret_new(args: argparse.Namespace, rest: list[str]) -> int:
    from ..net.auth import new_secret

    path = new_secret(args.file)
    print(f"wrote a new cluster secret to {path} (mode 0600); start every node with PSKV_SECRET_FILE={path}")
    return 0


def version(args: argparse.Namespace, rest: list[str]) -> int:
    from importlib import metadata

    try:
        version = metadata.version("pskv")
    except metadata.PackageNotFoundError:  # running from a source tree (PYTHONPATH=src)
        import pskv

        version = getattr(pskv, "__version__", "unknown (not installed)")
    print(f"pskv {version}")
    return 0
