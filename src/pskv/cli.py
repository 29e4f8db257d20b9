"""The `pskv` command: argparse into launch/run/data/demo/bench; no logic of its own.

Try it: `pskv launch -n 2 -- python -c "import os; print(os.environ['PSKV_RANK'])"`
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from .errors import PskvError

_FORWARDED = ("demo", "bench", "run", "evaluate")  # their own main() parses the rest of the arguments


def main(argv: list[str] | None = None) -> int:
    """Run `pskv ...` with `argv` (default sys.argv[1:]); return the exit status."""
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if rest and args.subcommand not in _FORWARDED:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    try:
        return args.run(args, rest)
    except PskvError as exc:
        print(f"pskv {args.subcommand}: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pskv", description="pskv: a parameter server over ZeroMQ")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "launch",
        help="start N nodes that run CMD; non-zero if any node fails",
        usage="pskv launch -n N [--threads T] [--backups B] [--restore PATH | --join HOST:PORT] "
        "[--hostfile FILE | --ray [--address ADDR] | --hosts H [--link RATE]] "
        "[--coordinator-host H] [--no-shared-memory] [--insecure] [--metrics P] [--verbose] "
        "-- CMD ...",
    )
    run.add_argument("-n", "--nodes", type=int, required=True, help="number of node processes")
    run.add_argument("--threads", type=int, default=1, help="worker threads per node (PSKV_THREADS)")
    run.add_argument(
        "--backups",
        type=int,
        default=None,
        help="copies of each key range on other nodes (PSKV_BACKUPS, default 0); with B >= 1 the "
        "others go on when a node dies, and the launch exits 0 if they finish",
    )
    run.add_argument(
        "--restore",
        metavar="PATH",
        help="start the tables from a checkpoint (PSKV_RESTORE): a checkpoint's directory, or the "
        "directory node.checkpoint() wrote into (its newest complete one); any node count",
    )
    run.add_argument(
        "--join",
        metavar="HOST:PORT",
        help="add the N nodes to a running cluster (PSKV_JOIN): its coordinator's address; they "
        "get the next free ranks and take their share of every table (with backups: copies at the "
        "end of some ranges' chains)",
    )
    run.add_argument(
        "--hostfile",
        type=Path,
        help="one host per line; node i runs on host i %% len over ssh (default: all nodes on this machine)",
    )
    run.add_argument(
        "--coordinator-host",
        help="address the coordinator binds (default 127.0.0.1, or this machine's address with a remote hostfile)",
    )
    run.add_argument(
        "--ray",
        action="store_true",
        help="one node per Ray actor, placed by Ray (pip install 'pskv[ray]'); node 0 runs the coordinator",
    )
    run.add_argument(
        "--address",
        metavar="ADDR",
        help="with --ray: the Ray cluster (ray.init's address: auto, ray://HEAD:10001; default a private local Ray)",
    )
    run.add_argument(
        "--insecure",
        action="store_true",
        help="no cluster secret: connections unauthenticated and unencrypted, for a trusted private "
        "network that needs the bandwidth (PSKV_INSECURE=1 does the same, also for `pskv run`)",
    )
    _add_host_flags(run)
    run.add_argument(
        "--metrics",
        type=int,
        metavar="P",
        help="node r serves Prometheus metrics at http://HOST:(P+r)/metrics (PSKV_METRICS_PORT; "
        "needs pip install 'pskv[metrics]'); watch them with `pskv top`",
    )
    _add_verbose(run)
    run.add_argument("command", nargs=argparse.REMAINDER, help="the command every node runs")
    run.set_defaults(run=_launch)

    top = sub.add_parser(
        "top",
        help="a live view of a running cluster from its nodes' metrics endpoints "
        "(pskv launch --metrics P); alone it finds this machine's newest such run",
    )
    top.add_argument("urls", nargs="*", metavar="URL", help="metrics endpoints (host:port or http://host:port/metrics)")
    top.add_argument("--metrics-port", type=int, metavar="P", help="node r at port P + r (PSKV_METRICS_PORT)")
    top.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="with --metrics-port: watch nodes 0..N-1 (default: those "
        "of the run that serves at P, else every answering port "
        "from P up)",
    )
    top.add_argument("--host", default="127.0.0.1", help="with --metrics-port: the nodes' host (default 127.0.0.1)")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    top.add_argument("--once", action="store_true", help="print one frame (rates over one interval) and exit")
    top.set_defaults(run=_top)

    app = sub.add_parser(
        "run",
        add_help=False,
        allow_abbrev=False,  # --l or --li is the app's, not --link
        help="run an app (mf, kge, word2vec, mnist, lr, lasso) on N local nodes, or as this node's "
        "part; `pskv run APP --help`: the app's options",
        usage="pskv run APP [-n N] [--threads T] [--hosts H [--link RATE]] [--no-shared-memory] "
        "[--insecure] [--verbose] [--] [APP ARGS ...]",
    )
    app.add_argument("app", nargs="?", help="mf, kge, word2vec, mnist, lr or lasso")
    app.add_argument("-h", "--help", action="store_true", help="this help, or with APP the app's options")
    app.add_argument(
        "-n", "--nodes", type=int, help="local node processes to start (default 1); ignored under `pskv launch`"
    )
    app.add_argument("--threads", type=int, help="worker threads per node (default 1)")
    _add_host_flags(app)
    app.add_argument(
        "--insecure",
        action="store_true",
        help="no cluster secret: connections unauthenticated and unencrypted (PSKV_INSECURE=1)",
    )
    _add_verbose(app)
    app.set_defaults(run=_run_app, run_parser=app)

    data = sub.add_parser("data", help="list or fetch the apps' data sets (pskv data list)")
    data_sub = data.add_subparsers(dest="action", required=True, metavar="ACTION")
    data_sub.add_parser("list", help="the data sets, and which are cached").set_defaults(run=_data_list)
    fetch = data_sub.add_parser("fetch", help="download, verify and cache data sets")
    fetch.add_argument("names", nargs="+", metavar="NAME")
    fetch.add_argument("--quiet", action="store_true", help="print only the directories")
    fetch.set_defaults(run=_data_fetch)
    convert = data_sub.add_parser(
        "convert",
        help="libsvm/svmlight text -> pskv's binary sparse format (.pskvsp), which `pskv run lr` workers memory-map",
    )
    convert.add_argument("source", type=Path, metavar="FILE.libsvm")
    convert.add_argument("out", type=Path, metavar="OUT.pskvsp")
    convert.add_argument("--quiet", action="store_true", help="no progress bar")
    convert.add_argument(
        "--real-labels",
        action="store_true",
        help="keep the label column as real-valued targets (float64: lasso), not 0/1 classes (lr)",
    )
    convert.set_defaults(run=_data_convert)

    ckpt = sub.add_parser("checkpoint", help="list the checkpoints in a directory, or inspect and verify one")
    ckpt_sub = ckpt.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = ckpt_sub.add_parser("list", help="the checkpoints under DIR, oldest first, complete or not")
    listing.add_argument("directory", type=Path, metavar="DIR")
    listing.set_defaults(run=_checkpoint_list)
    inspect = ckpt_sub.add_parser(
        "inspect", help="tables, sizes, clock and age of a checkpoint; verifies every checksum (exit 2 if one fails)"
    )
    inspect.add_argument("path", type=Path, metavar="PATH", help="a checkpoint, or a directory (its newest)")
    inspect.set_defaults(run=_checkpoint_inspect)

    secret = sub.add_parser("secret", help="make a cluster secret for nodes that other launchers start")
    secret_sub = secret.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = secret_sub.add_parser(
        "new", help="write a new secret to FILE (mode 0600; never overwrites); give every node PSKV_SECRET_FILE=FILE"
    )
    new.add_argument("file", type=Path, metavar="FILE")
    new.set_defaults(run=_secret_new)

    evaluate = sub.add_parser(
        "evaluate",
        add_help=False,
        help="test each checkpoint of a `pskv run mnist --eval-freq` run once, as it appears (pskv evaluate --help)",
    )
    evaluate.set_defaults(run=_evaluate)

    for name, text in (
        ("demo", "run the demo (pskv demo --help)"),
        ("bench", "run the benchmarks (pskv bench --help)"),
    ):
        sub.add_parser(name, help=text, add_help=False).set_defaults(run=_forward)

    sub.add_parser("version", help="print the version").set_defaults(run=_version)
    return parser


def _add_host_flags(parser: argparse.ArgumentParser) -> None:
    """--hosts, --link and --no-shared-memory, which `pskv launch` and `pskv run` share."""
    parser.add_argument(
        "--hosts",
        type=int,
        metavar="H",
        help="run the nodes as H emulated hosts of this machine (needs root, ip and tc): one network "
        "namespace per host, joined by veth pairs on a bridge; nodes go to hosts in blocks "
        "(nodes 0..k-1 on host 0), and the nodes of one host share its address and memory",
    )
    parser.add_argument(
        "--link",
        metavar="RATE",
        help="with --hosts: each host's link carries at most RATE each way (tc tbf; e.g. 100mbit, "
        "1gbit, 10gbit; default unlimited)",
    )
    parser.add_argument(
        "--no-shared-memory",
        action="store_true",
        help="nodes of one host talk by messages, not shared memory (PSKV_SHARED_MEMORY=0)",
    )


def _add_verbose(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="the launcher also prints how to add nodes while the cluster runs (the coordinator's "
        "address and the secret file's path)",
    )


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


def _evaluate(args: argparse.Namespace, rest: list[str]) -> int:
    from .apps.mnist import evaluate_main

    return evaluate_main(rest)


def _launch(args: argparse.Namespace, rest: list[str]) -> int:
    from .launch import launch

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    _launcher_environ(args, hosts=False)
    if args.ray:
        return _launch_ray(args, command)
    if args.address is not None:
        from .errors import ConfigError

        raise ConfigError("--address names a Ray cluster; it needs --ray")
    return launch(
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
    from .errors import ConfigError
    from .launch_ray import launch_ray

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


def _top(args: argparse.Namespace, rest: list[str]) -> int:
    from .errors import ConfigError
    from .monitor import top

    if args.nodes is not None and args.metrics_port is None:
        raise ConfigError("pskv top: --nodes N counts the ports from --metrics-port P; give both, or neither")
    urls = top.find(args.metrics_port, args.nodes, args.host, args.urls)
    if not urls:
        raise ConfigError(
            "pskv top found no running cluster with metrics on this machine; start one with "
            "`pskv launch --metrics P` (or `PSKV_METRICS_PORT=P pskv run ...`), or give "
            "--metrics-port P [--nodes N] [--host H] or the nodes' URLs"
        )
    return top.run(urls, once=args.once, interval=args.interval)


def _run_app(args: argparse.Namespace, rest: list[str]) -> int:
    from .apps import APPS, run

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


def _data_list(args: argparse.Namespace, rest: list[str]) -> int:
    from .data.fetch import describe

    print("\n".join(describe()))
    return 0


def _data_fetch(args: argparse.Namespace, rest: list[str]) -> int:
    from .data.fetch import fetch

    for name in args.names:
        print(fetch(name, quiet=args.quiet))
    return 0


def _data_convert(args: argparse.Namespace, rest: list[str]) -> int:
    from .data.sparse import convert

    data = convert(args.source, args.out, quiet=args.quiet, real_labels=args.real_labels)
    keys = len(data.distinct_keys())
    labels = (
        f"targets {float(data.labels.min()):g}..{float(data.labels.max()):g}"
        if args.real_labels
        else f"{float(data.labels.mean()):.1%} positive"
    )
    print(f"{args.out}: {data.rows:,} examples, {data.nnz:,} non-zeros, {keys:,} distinct features, {labels}")
    return 0


def _checkpoint_list(args: argparse.Namespace, rest: list[str]) -> int:
    import json
    import time

    from .checkpoint import format as fmt

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


def _checkpoint_inspect(args: argparse.Namespace, rest: list[str]) -> int:
    from .checkpoint import format as fmt

    print("\n".join(fmt.describe(args.path)))
    return 0


def _forward(args: argparse.Namespace, rest: list[str]) -> int:
    import importlib

    # (import_module looks in sys.modules first: `from . import bench` took a package attribute
    # that an earlier import had set, past a test's stand-in)
    module = importlib.import_module(f"pskv.{'demo' if args.subcommand == 'demo' else 'bench'}")
    return module.main(rest)


def _secret_new(args: argparse.Namespace, rest: list[str]) -> int:
    from .net.auth import new_secret

    path = new_secret(args.file)
    print(f"wrote a new cluster secret to {path} (mode 0600); start every node with PSKV_SECRET_FILE={path}")
    return 0


def _version(args: argparse.Namespace, rest: list[str]) -> int:
    from importlib import metadata

    try:
        version = metadata.version("pskv")
    except metadata.PackageNotFoundError:  # running from a source tree (PYTHONPATH=src)
        import pskv

        version = getattr(pskv, "__version__", "unknown (not installed)")
    print(f"pskv {version}")
    return 0
