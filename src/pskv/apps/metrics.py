"""What the apps report: progress, sums over every worker, the per-epoch report, the watchdog.

Part of the apps' shared skeleton (common.py re-exports every name here); see common.py for the API.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

import pskv

from ..errors import ConfigError
from ..launch import BAR_TAG

TAG = "@@pskv "  # prefix of the JSON lines of --progress json
_LINE_INTERVAL = 2.0  # seconds between progress lines when stderr is not a terminal
# A batch takes milliseconds to seconds (a thrashing relocation run: pulls of up to 9 s measured, see
# benchmarks/RESULTS-word2vec.md); five minutes without one is a hang, not a slow step.
STALL_TIMEOUT = 300.0
STALL_STATUS = 3  # exit status of a node stopped by the watchdog


def is_leader(w: pskv.Worker) -> bool:
    """True on thread 0 of the lowest live node (node 0 unless it died), the one worker that prints."""
    return w.thread == 0 and w.rank == min(w.members, default=0)


def say(**msg) -> None:
    """Print one machine-readable line (TAG + JSON) on stdout."""
    print(TAG + json.dumps(msg), flush=True)


class Progress:
    """Progress of the whole cluster, estimated from one worker's count times `scale`.

    Every worker may make one and call update(); only node 0's thread 0 shows anything."""

    def __init__(
        self,
        w: pskv.Worker,
        *,
        total: int,
        scale: int = 1,
        unit: str = "samples",
        mode: str = "auto",
        watchdog: Watchdog | None = None,
    ) -> None:
        self.watchdog = watchdog  # poked by every update() of every worker
        relayed = not sys.stderr.isatty()  # a bar's frames go to `pskv run`/`launch` as lines (BAR_TAG)
        if mode == "auto":  # a bar on a terminal: ours, or the launcher's (PSKV_TERMINAL)
            mode = "bar" if not relayed or os.environ.get("PSKV_TERMINAL") == "1" else "lines"
        self.leader = is_leader(w)
        self.mode = {"log": "lines"}.get(mode, mode) if self.leader else "none"
        self.total, self.scale, self.unit = total, scale, unit
        self.done = 0
        self._start = self._last = time.monotonic()
        self._bar = self._logs = None
        if self.mode == "bar":
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            if relayed:
                width = int(os.environ.get("COLUMNS", "100"))
                self._bar = tqdm(
                    total=total,
                    unit=unit,
                    unit_scale=True,
                    smoothing=0.1,
                    file=_Frames(sys.stderr),
                    ncols=max(40, width - 1),
                    mininterval=0.2,
                    ascii=False,
                )
            else:  # log lines (pskv's warnings) go through tqdm.write: above the bar, never through it
                self._bar = tqdm(total=total, unit=unit, unit_scale=True, smoothing=0.1, dynamic_ncols=True)
                self._logs = logging_redirect_tqdm()
                self._logs.__enter__()

    def update(self, n: int) -> None:
        """Count `n` samples done by this worker (the cluster did about n * scale)."""
        if self.watchdog is not None:
            self.watchdog.poke()
        if self.mode == "none":
            return
        self.done += n * self.scale
        if self._bar is not None:
            self._bar.update(n * self.scale)
            return
        now = time.monotonic()
        if now - self._last < (_LINE_INTERVAL if self.mode == "lines" else 0.2):
            return
        self._last = now
        if self.mode == "json":
            say(kind="progress", done=self.done, total=self.total)
        else:
            rate = self.done / max(now - self._start, 1e-9)
            print(
                f"  {100 * self.done / max(self.total, 1):5.1f}%  {self.done:,} {self.unit}  {rate:,.0f} {self.unit}/s",
                file=sys.stderr,
                flush=True,
            )

    def write(self, line: str) -> None:
        """Print `line` without breaking the bar (leader only; a relayed bar: the launcher keeps it apart)."""
        if self._bar is not None and self._logs is not None:
            self._bar.write(line)
        elif self.leader:
            print(line, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
            if self._logs is not None:
                self._logs.__exit__(None, None, None)
                self._logs = None
            else:
                print(BAR_TAG, file=sys.stderr, flush=True)  # the bar ended: the launcher prints its last frame


class _Frames:
    """A file for tqdm that turns each redrawn frame ("\r" + text) into one BAR_TAG line, which the
    launcher reading this node's output draws in place on its terminal (launch.Cluster)."""

    def __init__(self, file) -> None:
        self._file = file

    def write(self, text: str) -> None:
        frames = text.replace("\n", "\r").split("\r")
        frame = next((f for f in reversed(frames) if f.strip()), "")
        if frame:
            self._file.write(BAR_TAG + frame.rstrip() + "\n")

    def flush(self) -> None:
        self._file.flush()


class Watchdog:
    """Stops a node that makes no progress: a bug that blocks a worker forever must not hang a run.

    `with watchdog:` around node.run(); the workers call poke() after each batch (Progress.update and
    Report.epoch do). If `seconds` pass without a poke, on_stall(message) runs once: by default it
    prints the message and the stack of every thread to stderr and ends the process with status 3
    (`pskv launch` then stops the other nodes). seconds <= 0: never. Threads and ownership: one daemon
    thread, pskv-app-watchdog, reads the time of the last poke; any thread may poke (one float store)."""

    def __init__(self, seconds: float, *, what: str = "pskv app", on_stall: Callable[[str], None] | None = None):
        self.seconds, self.what = float(seconds or 0.0), what
        self.on_stall = on_stall or _stop_stalled_process
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poke(self) -> None:
        self._last = time.monotonic()

    def __enter__(self) -> Watchdog:
        if self.seconds > 0 and self._thread is None:
            self.poke()
            self._stop.clear()
            self._thread = threading.Thread(target=self._watch, name="pskv-app-watchdog", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.seconds / 4)):
            idle = time.monotonic() - self._last
            if idle > self.seconds:
                self.on_stall(
                    f"{self.what}: no worker of this node finished a batch for {idle:.0f} s "
                    f"(--stall-timeout {self.seconds:g}); stopping this node with status {STALL_STATUS}. "
                    "The stack of every thread follows: a blocked pull, wait or barrier points at the "
                    "bug; raise --stall-timeout if a step really takes this long"
                )
                return


def _stop_stalled_process(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(STALL_STATUS)  # the workers are blocked: a normal exit would wait for them forever


class Reducer:
    """Sums of per-worker numbers over every worker of every node, once per round.

    Made collectively on every node (it declares the float64 table `name` of 2 x `size` rows).
    Every worker calls sum() the same number of times; each call pushes the worker's values, waits
    at one barrier, and pulls. Rounds alternate between two slots, so a fast worker's next push
    never lands in the slot a slow one still has to read (it cannot pass the next barrier before
    that read); slots only grow (no reset), and a worker's result is the growth since its previous
    read of that slot."""

    def __init__(self, node: pskv.Node, *, size: int, name: str = "app-metrics") -> None:
        node.table(name, rows=2 * size, dim=1, dtype="float64")
        self.name, self.size = name, size
        self._seen: dict[tuple[int, int], tuple[int, list[np.ndarray]]] = {}  # (rank, thread) -> (round, slots)
        self._lock = threading.Lock()  # guards the dict; each worker reads and writes only its own entry

    def sum(self, w: pskv.Worker, values: Sequence[float] | np.ndarray) -> np.ndarray:
        """Blocks until every worker called sum() for this round; returns the (size,) float64 totals."""
        mine = np.asarray(values, dtype=np.float64).reshape(-1)
        if mine.shape != (self.size,):
            raise ConfigError(f"Reducer.sum got {mine.shape[0]} values; it was made with size={self.size}")
        with self._lock:
            rounds, seen = self._seen.get((w.rank, w.thread), (0, [np.zeros(self.size), np.zeros(self.size)]))
        slot = rounds % 2
        table, keys = w.table(self.name), np.arange(slot * self.size, (slot + 1) * self.size)
        if rounds == 0:  # the sums so far (a resumed run restored them) are no worker's: start from them
            seen = [table.pull(np.arange(s * self.size, (s + 1) * self.size))[:, 0] for s in (0, 1)]
            w.barrier()  # nobody pushes before every worker read them
        table.push(keys, mine[:, None])
        w.barrier()
        cumulative = table.pull(keys)[:, 0]  # (size,) float64
        totals = cumulative - seen[slot]
        seen[slot] = cumulative
        with self._lock:
            self._seen[(w.rank, w.thread)] = (rounds + 1, seen)
        return totals


class Report:
    """Per-epoch metrics of one run: printed and kept by node 0 thread 0, then plotted and summarised.

    Metric values are plain floats keyed by name; each row also records `wall` (seconds since the
    Report was made). With --progress json the rows are TAG lines on stdout instead of a table."""

    def __init__(self, app: str, args: argparse.Namespace) -> None:
        self.app, self.args = app, args
        self.rows: list[dict] = []
        self.json = getattr(args, "progress", "auto") == "json"
        self._start = time.monotonic()
        self.watchdog = Watchdog(getattr(args, "stall_timeout", 0.0), what=f"pskv run {app}")

    def epoch(self, w: pskv.Worker, epoch: int, progress: Progress | None = None, **metrics: float) -> None:
        """Record epoch `epoch`'s metrics (thread 0 of every node, so a node that takes over leading
        has them all); the leader (is_leader) prints them."""
        self.watchdog.poke()
        if w.thread != 0:
            return
        row = {"epoch": epoch, "wall": time.monotonic() - self._start, **{k: float(v) for k, v in metrics.items()}}
        self.rows.append(row)
        if not is_leader(w):
            return
        if progress is not None and not progress.leader:
            progress = None  # it was made when another node led (that node died)
        if self.json:
            say(kind="epoch", **row)
            return
        text = "  ".join(
            f"{k} {v:.4f}" if isinstance(v, float) and k != "seconds" else f"{k} {v}"
            for k, v in metrics.items()
            if k != "seconds"
        )
        line = f"epoch {epoch:>3}  {text}" + (f"  ({metrics['seconds']:.2f} s)" if "seconds" in metrics else "")
        (progress.write if progress is not None else print)(line)

    def summary(self, lines: Sequence[str], *, rank: int = 0) -> None:
        """On node 0 (`rank`): print `lines` (the last is the headline), write --log and --plot."""
        if rank != 0:
            return
        if self.args.log:
            with open(self.args.log, "w") as f:
                f.writelines(json.dumps(row) + "\n" for row in self.rows)
        if self.args.plot:
            message = self.plot(self.args.plot)
            say(kind="note", text=message) if self.json else print(message, flush=True)
        if self.json:
            say(kind="summary", lines=list(lines))
        else:
            print("\n".join(["", f"summary ({self.app}):", *lines]), flush=True)

    def plot(self, path: Path, metrics: Sequence[str] | None = None) -> str:
        """Plot `metrics` (default: every metric but `seconds`) against wall time into `path`.
        Returns a one-line message (what was written, or why not)."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return f"--plot {path}: matplotlib is not installed; pip install 'pskv[plot]' to get plots"
        if not self.rows:
            return f"--plot {path}: no epoch finished, nothing to plot"
        every = dict.fromkeys(k for r in self.rows for k in r)  # a metric may be missing from some rows
        names = [n for n in (metrics or every) if n in every and n not in ("epoch", "wall", "seconds")]
        # one panel per metric: scales differ (a loss of 2.4 beside 150,000 words/s would be a flat line)
        fig, axes = plt.subplots(len(names), 1, sharex=True, figsize=(7, 0.8 + 2.0 * len(names)), squeeze=False)
        for ax, name in zip(axes[:, 0], names, strict=True):
            rows = [r for r in self.rows if name in r]  # e.g. valid_mrr only every --eval-every epochs
            ax.plot([r["wall"] for r in rows], [r[name] for r in rows], marker="o")
            ax.set_ylabel(name)
            ax.grid(alpha=0.3)
        axes[0, 0].set_title(f"pskv {self.app}")
        axes[-1, 0].set_xlabel("wall time (s)")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return f"plot: {path}"
