"""The `pskv` command's argparse tree: one function per subcommand, each handing its arguments to the
`run` of cli.commands that does the work (`set_defaults(run=...)`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import commands

FORWARDED = ("demo", "bench", "run", "evaluate")  # their own main() parses the rest of the arguments


def build() -> argparse.ArgumentParser:
    """The parser of `pskv ...`; `args.run(args, rest)` runs the subcommand chosen."""
    parser = argparse.ArgumentParser(prog="pskv", description="pskv: a parameter server over ZeroMQ")
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="COMMAND")
    _launch(sub)
    _top(sub)
    _run(sub)
    _data(sub)
    _checkpoint(sub)
    _secret(sub)
    evaluate = sub.add_parser(
        "evaluate",
        add_help=False,
        help="test each checkpoint of a `pskv run mnist --eval-freq` run once, as it appears (pskv evaluate --help)",
    )
    evaluate.set_defaults(run=commands.evaluate)
    for name, text in (
        ("demo", "run the demo (pskv demo --help)"),
        ("bench", "run the benchmarks (pskv bench --help)"),
    ):
        sub.add_parser(name, help=text, add_help=False).set_defaults(run=commands.forward)
    sub.add_parser("version", help="print the version").set_defaults(run=commands.version)
    return parser


def _launch(sub) -> None:
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
    _add_placement_flags(run)
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
    run.set_defaults(run=commands.launch)


def _add_placement_flags(run: argparse.ArgumentParser) -> None:
    """Where `pskv launch` puts the nodes: a hostfile, Ray, the coordinator's address; and --insecure."""
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


def _top(sub) -> None:
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
    top.set_defaults(run=commands.top)


def _run(sub) -> None:
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
    app.set_defaults(run=commands.run_app, run_parser=app)


def _data(sub) -> None:
    data = sub.add_parser("data", help="list or fetch the apps' data sets (pskv data list)")
    data_sub = data.add_subparsers(dest="action", required=True, metavar="ACTION")
    data_sub.add_parser("list", help="the data sets, and which are cached").set_defaults(run=commands.data_list)
    fetch = data_sub.add_parser("fetch", help="download, verify and cache data sets")
    fetch.add_argument("names", nargs="+", metavar="NAME")
    fetch.add_argument("--quiet", action="store_true", help="print only the directories")
    fetch.set_defaults(run=commands.data_fetch)
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
    convert.set_defaults(run=commands.data_convert)


def _checkpoint(sub) -> None:
    ckpt = sub.add_parser("checkpoint", help="list the checkpoints in a directory, or inspect and verify one")
    ckpt_sub = ckpt.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = ckpt_sub.add_parser("list", help="the checkpoints under DIR, oldest first, complete or not")
    listing.add_argument("directory", type=Path, metavar="DIR")
    listing.set_defaults(run=commands.checkpoint_list)
    inspect = ckpt_sub.add_parser(
        "inspect", help="tables, sizes, clock and age of a checkpoint; verifies every checksum (exit 2 if one fails)"
    )
    inspect.add_argument("path", type=Path, metavar="PATH", help="a checkpoint, or a directory (its newest)")
    inspect.set_defaults(run=commands.checkpoint_inspect)


def _secret(sub) -> None:
    secret = sub.add_parser("secret", help="make a cluster secret for nodes that other launchers start")
    secret_sub = secret.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = secret_sub.add_parser(
        "new", help="write a new secret to FILE (mode 0600; never overwrites); give every node PSKV_SECRET_FILE=FILE"
    )
    new.add_argument("file", type=Path, metavar="FILE")
    new.set_defaults(run=commands.secret_new)


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
