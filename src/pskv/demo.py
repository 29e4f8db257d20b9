"""The demo: matrix factorization of MovieLens-100K on 2 local nodes x 2 worker threads.

    pskv demo                      # what `make demo` runs: fetch ML-100K, train pskv.apps.mf
    pskv demo --nodes 3 --threads 1 --epochs 10
    pskv demo --data synthetic     # generated ratings (a rank-8 matrix plus noise), no download

The front process fetches the data, starts the nodes with pskv.launch and turns the JSON lines
that node 0 prints (apps.common.TAG) into a progress bar, one line per epoch and a summary whose
last line is `test RMSE X.XXXX`; node 0 writes a plot when matplotlib is installed. With
`--data ml-100k` the nodes run the MF app (pskv.apps.mf): users split over the workers, item
factors in a pskv table. With `--data synthetic` they run the small trainer below: each node
generates the same seeded ratings, keeps user factors in its worker threads and item factors in
a table with a server-side Adagrad updater, and reports RMSE through a second table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time

import numba
import numpy as np

from .apps.common import TAG


def _parse(argv):
    p = argparse.ArgumentParser(prog="pskv demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", choices=["ml-100k", "synthetic"], default="ml-100k")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, help="default: 30 on ml-100k, 15 on synthetic")
    p.add_argument("--plot", default="pskv-demo.png", help="where node 0 writes the plot ('' for none)")
    p.add_argument("--max-ratings", type=int, default=0, help="ml-100k: use a sample of this many ratings")
    p.add_argument("--users", type=int, default=10_000, help="synthetic only")
    p.add_argument("--items", type=int, default=5_000, help="synthetic only")
    p.add_argument("--ratings", type=int, default=1_000_000, help="synthetic only")
    p.add_argument("--rank", type=int, default=8, help="synthetic only (ml-100k: the app's default, 100)")
    p.add_argument("--batch", type=int, default=2000, help="synthetic only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--node", action="store_true", help=argparse.SUPPRESS)  # set on the node processes
    args = p.parse_args(argv)
    if args.epochs is None:
        args.epochs = 30 if args.data == "ml-100k" else 15
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parse(argv)
    if args.node:
        _node_main(args)
        return 0
    return _front(args, argv)


# ---- front process: launch, show progress, summarise -------------------------------------------
def _front(args, argv) -> int:
    plot = args.plot if args.plot and importlib.util.find_spec("matplotlib") else ""
    if args.data == "ml-100k":
        from .data import fetch

        fetch("ml-100k")
        print(
            f"pskv demo: matrix factorization of MovieLens-100K (90/10 split), {args.nodes} nodes x "
            f"{args.threads} threads, {args.epochs} epochs",
            flush=True,
        )
        command = [
            sys.executable,
            "-m",
            "pskv.apps.mf",
            "--data",
            "ml-100k",
            "--progress",
            "json",
            "--epochs",
            str(args.epochs),
            "--seed",
            str(args.seed),
            "--max-ratings",
            str(args.max_ratings),
        ]
    else:
        print(
            f"pskv demo: matrix factorization, {args.ratings:,} generated ratings of {args.users:,} users x "
            f"{args.items:,} items (rank {args.rank} + noise 0.1), {args.nodes} nodes x {args.threads} threads, "
            f"{args.epochs} epochs",
            flush=True,
        )
        command = [sys.executable, "-m", "pskv.demo", "--node", *argv]
    if plot or args.data == "synthetic":
        command += ["--plot", plot]  # synthetic nodes parse the demo's flags: '' turns the plot off
    start = time.monotonic()
    status, summary, notes = _watch(args, command)
    if status != 0:
        return status
    print(f"\nsummary ({time.monotonic() - start:.1f} s in all, nodes included):")
    for line in notes + ([] if plot or not args.plot else ["(no plot: pip install 'pskv[plot]' for matplotlib)"]):
        print(line)
    print("\n".join(summary))
    return 0


def _watch(args, command) -> tuple[int, list[str], list[str]]:
    """Run the nodes; show node 0's progress and epochs. Returns (status, summary lines, notes)."""
    from .launch import start_local

    summary, notes, seen = [], [], 0
    bar = _Progress(unit="ratings")
    with start_local(args.nodes, command, threads=args.threads) as cluster:
        status = None
        while status is None:
            try:
                status = cluster.wait(timeout=0.2)
            except TimeoutError:
                pass
            lines = cluster.output(0).splitlines()
            for line in lines[seen:]:
                if TAG not in line:
                    continue
                msg = json.loads(line.split(TAG, 1)[1])
                if msg["kind"] == "progress":
                    bar.update(msg["done"], msg["total"])
                elif msg["kind"] == "epoch":
                    bar.write(
                        f"epoch {msg['epoch']:>2}  train RMSE {msg['train_rmse']:.4f}  "
                        f"test RMSE {msg['test_rmse']:.4f}  ({msg['seconds']:.2f} s)"
                    )
                elif msg["kind"] == "summary":
                    summary = msg["lines"]
                elif msg["kind"] == "note":
                    notes.append(msg["text"])
            seen = len(lines)
        bar.close(finished=status == 0)
        if status != 0:
            print(
                f"pskv demo failed (status {status}); last lines of the nodes:\n{cluster.logs_tail()}", file=sys.stderr
            )
    return status, summary, notes


class _Progress:
    """Node 0's progress as the apps show theirs (apps.metrics.Progress): a tqdm bar on stderr when it
    is a terminal, else a line every LINE_INTERVAL seconds (no bar frames, no carriage returns in a
    file). Rates count from the first report on (numba compiles before it), and a line shows one only
    once RATE_AFTER seconds of reports are in, so the first readings are not a jump over milliseconds.
    Front process only, one thread."""

    LINE_INTERVAL = 2.0
    RATE_AFTER = 1.0

    def __init__(self, *, unit: str, terminal: bool | None = None) -> None:
        self.unit = unit
        self.terminal = sys.stderr.isatty() if terminal is None else terminal
        self._bar = None
        self._first: tuple[float, int] | None = None  # (time, done) of the first report
        self._last_line = 0.0  # time of the last line
        self.done = self.total = 0

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        self.done, self.total = min(done, total), total
        if self._first is None:
            self._first = (now, self.done)
            self._last_line = now
            if self.terminal:
                from tqdm import tqdm

                # initial=: tqdm's rate counts from here, not from 0 over the milliseconds since the bar appeared
                self._bar = tqdm(
                    total=total,
                    initial=self.done,
                    unit=self.unit,
                    unit_scale=True,
                    smoothing=0.1,
                    desc="training",
                    dynamic_ncols=True,
                )
            return
        if self._bar is not None:
            self._bar.update(self.done - self._bar.n)
        elif now - self._last_line >= self.LINE_INTERVAL:
            self._last_line = now
            self._line(now)

    def _line(self, now: float) -> None:
        assert self._first is not None  # (update() set it before any line)
        t0, done0 = self._first
        rate = f"  {(self.done - done0) / (now - t0):,.0f} {self.unit}/s" if now - t0 >= self.RATE_AFTER else ""
        print(
            f"  {100 * self.done / max(self.total, 1):5.1f}%  {self.done:,} {self.unit}{rate}",
            file=sys.stderr,
            flush=True,
        )

    def write(self, line: str) -> None:
        """Print `line` on stdout, above the bar if there is one."""
        if self._bar is not None:
            self._bar.write(line)
        else:
            print(line, flush=True)

    def close(self, *, finished: bool) -> None:
        if self._bar is not None:
            if finished:
                self._bar.update(self._bar.total - self._bar.n)
            self._bar.close()
        elif finished and self._first is not None:
            self.done = self.total
            self._line(time.monotonic())


# ---- node processes of --data synthetic --------------------------------------------------------
def _data(args):
    """The same seeded ratings on every node: (users, items, ratings) for train and test."""
    rng = np.random.default_rng(args.seed)
    u_true = rng.normal(0, 1 / np.sqrt(np.sqrt(args.rank)), (args.users, args.rank))
    v_true = rng.normal(0, 1 / np.sqrt(np.sqrt(args.rank)), (args.items, args.rank))
    users = rng.integers(0, args.users, args.ratings)
    items = rng.zipf(1.3, args.ratings) % args.items  # skewed item popularity, as in real ratings
    r = np.einsum("ij,ij->i", u_true[users], v_true[items]) + rng.normal(0, 0.1, args.ratings)
    test = rng.random(args.ratings) < 0.1
    return (users[~test], items[~test], r[~test]), (users[test], items[test], r[test])


@numba.njit(nogil=True, cache=True)
def _sgd_batch(U, users, V, ratings, lr, lam, grad_v):
    """SGD on user rows U (local) and gradients for the pulled item rows V; returns the squared error."""
    sse = 0.0
    k = U.shape[1]
    for j in range(users.shape[0]):
        u = users[j]
        e = ratings[j]
        for c in range(k):
            e -= U[u, c] * V[j, c]
        sse += e * e
        for c in range(k):
            uc = U[u, c]
            grad_v[j, c] = -e * uc + lam * V[j, c]
            U[u, c] += lr * (e * V[j, c] - lam * uc)
    return sse


@numba.njit(nogil=True, cache=True)
def _sse(U, users, V, ratings):
    sse = 0.0
    for j in range(users.shape[0]):
        e = ratings[j]
        for c in range(U.shape[1]):
            e -= U[users[j], c] * V[j, c]
        sse += e * e
    return sse


def _node_main(args) -> None:
    import pskv

    from .apps import common

    node = pskv.init()
    train, test = _data(args)
    node.table(
        "items",
        rows=args.items,
        dim=args.rank,
        updater=pskv.Adagrad(lr=0.1, initial_accumulator=0.1),
        init=pskv.Normal(std=0.1, seed=args.seed),
    )
    reducer = common.Reducer(node, size=4)  # train sse, train n, test sse, test n
    report = common.Report("demo", argparse.Namespace(progress="json", plot=args.plot or None, log=None))
    workers = node.num_nodes * node.config.threads
    baseline = float(np.sqrt(np.mean((test[2] - train[2].mean()) ** 2)))
    t0 = time.monotonic()

    def work(w: pskv.Worker) -> None:
        me = w.rank * node.config.threads + w.thread
        mine = lambda part: [a[part[0] % workers == me] for a in (part[0], part[1], part[2])]  # noqa: E731
        (tu, ti, tr), (su, si, sr) = mine(train), mine(test)
        U = np.random.default_rng([args.seed, me]).normal(0, 0.1, (args.users, args.rank)).astype(np.float32)
        items = w.table("items")
        grad = np.empty((args.batch, args.rank), np.float32)
        progress = common.Progress(w, total=args.epochs * len(train[0]), scale=workers, mode="json")
        for epoch in range(1, args.epochs + 1):
            t_epoch = time.monotonic()
            order = np.random.default_rng([args.seed, me, epoch]).permutation(len(tu))
            sse = 0.0
            for lo in range(0, len(order), args.batch):
                b = order[lo : lo + args.batch]
                V = items.pull(ti[b])  # (batch, rank) float32
                sse += _sgd_batch(U, tu[b], V, tr[b], 0.05, 0.02, grad[: len(b)])
                items.push(ti[b], grad[: len(b)])
                progress.update(len(b))
            s = reducer.sum(w, [sse, len(tu), _sse(U, su, items.pull(si), sr), len(su)])
            report.epoch(
                w,
                epoch,
                train_rmse=np.sqrt(s[0] / s[1]),
                test_rmse=np.sqrt(s[2] / s[3]),
                seconds=time.monotonic() - t_epoch,
            )

    node.run(work)
    if node.rank == 0:
        last, wall = report.rows[-1], time.monotonic() - t0
        report.summary(
            [
                f"{node.num_nodes} nodes x {node.config.threads} threads, {args.epochs} epochs in "
                f"{wall:.1f} s ({args.epochs * len(train[0]) / wall:,.0f} ratings/s)",
                f"baseline (predict the mean rating): test RMSE {baseline:.4f}; noise floor 0.1000",
                f"train RMSE {last['train_rmse']:.4f}",
                f"test RMSE {last['test_rmse']:.4f}",
            ]
        )
    node.shutdown()


if __name__ == "__main__":
    sys.exit(main())
