"""LeNet-5 on Fashion-MNIST, trained data-parallel through pskv.torch.DataParallel.

    pskv run mnist -- --epochs 2                         # 1 node
    pskv run mnist --nodes 2 -- --mode async --epochs 2  # 2 nodes, each half of every global batch
    pskv run mnist -- --checkpoint-dir ckpt --eval-freq 200 &  pskv evaluate --checkpoint-dir ckpt

Data: `--data fashion-mnist` (Debian's dataset-fashion-mnist, `pskv data fetch fashion-mnist`) or a
directory in the MNIST layout (the four idx files, gzipped or not). Every epoch draws one
permutation (seeded); each global batch of --batch examples is split over the workers, worker i
taking the i-th slice, so `--mode sync` trains the same weights as one process on --batch.
Prints train loss and accuracy and test accuracy per epoch; the summary ends with `test accuracy`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import pskv

from ..data import DATASETS, fetch
from ..data.images import load_idx_set
from ..data.trained import write_atomic
from . import common


def lenet5():
    """LeNet-5 (LeCun et al. 1998) as in torch's tutorials: 61,706 parameters."""
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(400, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    )


def load(data: str, limit: int = 0, test_limit: int = 0):
    """(train x (n, 1, 28, 28) float32 in [0, 1], train y int64, test x, test y) as torch tensors."""
    import os

    import torch

    directory = Path(data) if os.path.isdir(data) else fetch(data, quiet=True)
    tx, ty, vx, vy = load_idx_set(directory)
    if limit:
        tx, ty = tx[:limit], ty[:limit]
    if test_limit:
        vx, vy = vx[:test_limit], vy[:test_limit]

    def images(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(a.astype(np.float32)[:, None] / 255.0)

    return images(tx), torch.from_numpy(ty.astype(np.int64)), images(vx), torch.from_numpy(vy.astype(np.int64))


def accuracy(model, x, y, batch: int = 1000) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of `model` on (x, y)."""
    import torch

    loss = correct = 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out = model(x[i : i + batch])
            loss += float(torch.nn.functional.cross_entropy(out, y[i : i + batch], reduction="sum"))
            correct += int((out.argmax(1) == y[i : i + batch]).sum())
    return loss / len(x), correct / len(x)


def load_model(path):
    """LeNet-5 with the weights `--out` wrote (a plain process; needs torch), in eval mode."""
    import torch

    model = lenet5()
    model.load_state_dict(torch.load(path, weights_only=True))
    return model.eval()


def _parser() -> argparse.ArgumentParser:
    p = common.parser("mnist", "LeNet-5 on Fashion-MNIST through pskv.torch.DataParallel", epochs=2)
    p.add_argument(
        "--data",
        default="fashion-mnist",
        help="a data set name (pskv data list) or an MNIST-layout directory of idx files",
    )
    p.add_argument("--mode", default="sync", help="sync (aggregated BSP rounds), async, or ssp:S")
    p.add_argument(
        "--checkpoint-dir",
        type=Path,
        metavar="DIR",
        help="with --eval-freq: write checkpoints of the weights under DIR (pskv evaluate reads them)",
    )
    p.add_argument("--batch", type=int, default=64, help="global batch, split over every worker")
    p.add_argument("--lr", type=float, default=0.05, help="server-side SGD learning rate")
    p.add_argument("--momentum", type=float, default=0.9, help="server-side SGD momentum")
    p.add_argument("--limit", type=int, default=0, metavar="N", help="train on the first N examples (0: all)")
    p.add_argument("--test-limit", type=int, default=0, metavar="N", help="test on the first N examples (0: all)")
    p.add_argument(
        "--eval-freq",
        type=int,
        default=0,
        metavar="STEPS",
        help="with --checkpoint-dir: a checkpoint every STEPS steps and after the last, all kept "
        "(`pskv evaluate --checkpoint-dir DIR` evaluates each)",
    )
    p.add_argument(
        "--out",
        type=Path,
        metavar="MODEL.pt",
        help="write the trained weights (torch state_dict; pskv.apps.mnist.load_model reads it)",
    )
    return p


def check(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and check mnist's arguments (`pskv run mnist` calls it before any node starts, without
    importing torch): a mistake in a flag or a --data that names no data set or directory ends the run
    in one line with status 2 (common.arguments)."""
    return common.arguments("mnist", _parser(), argv, _check)


def _check(args: argparse.Namespace) -> None:
    common.at_least(args, 1, "--epochs", "--batch")
    common.at_least(args, 0, "--limit", "--test-limit", "--eval-freq")
    mode = args.mode
    if mode not in ("sync", "async") and not (mode.startswith("ssp:") and mode[4:].isdigit()):
        raise pskv.ConfigError(f"--mode {mode!r} is not sync, async or ssp:S (S a staleness >= 0)")
    if args.data not in DATASETS and not Path(args.data).is_dir():
        raise pskv.ConfigError(f"--data {args.data!r} is neither a data set (pskv data list) nor a directory")
    if args.eval_freq and args.checkpoint_dir is None:
        raise pskv.ConfigError("--eval-freq needs --checkpoint-dir DIR (where pskv evaluate finds the checkpoints)")
    if args.checkpoint_dir is not None and not args.eval_freq:
        raise pskv.ConfigError(
            "--checkpoint-dir needs --eval-freq STEPS (mnist writes checkpoints for pskv evaluate "
            "only; it does not resume)"
        )


def main(argv: list[str] | None = None) -> int:
    """Run mnist on this node (or as a 1-node cluster); returns the exit status."""
    args = check(argv)
    import torch

    import pskv.torch as ptorch

    torch.set_num_threads(1)  # one compute thread per worker process (10-20x faster on a loaded machine)
    updater = pskv.SGD(lr=args.lr, momentum=args.momentum)

    def setup(s: common.Session):
        if s.node.rank == 0 and args.data in DATASETS:
            fetch(args.data)  # one node fetches; the others then find it cached
        w = s.node.worker()
        w.barrier()
        w.close()
        data = load(args.data, args.limit, args.test_limit)
        torch.manual_seed(args.seed)
        models = [lenet5() for _ in range(s.threads)]  # here: torch's seed is global, threads would share it
        ptorch.DataParallel.declare(s.node, models[0], mode=args.mode, updater=updater)
        if s.node.rank == 0:
            n = sum(p.numel() for p in models[0].parameters())
            print(
                f"mnist: LeNet-5 ({n:,} parameters) on {len(data[0]):,} images, {s.node.num_nodes} node(s) x "
                f"{s.threads} thread(s), mode {args.mode}, global batch {args.batch}",
                flush=True,
            )
        return s, data, models

    def train(w: pskv.Worker, state) -> None:
        s, (x, y, vx, vy), models = state
        model = models[w.thread]
        dp = ptorch.DataParallel(model, w, mode=args.mode, updater=updater)
        me, share = s.index(w), args.batch // dp.workers
        if share < 1:
            raise pskv.ConfigError(f"mnist: --batch {args.batch} is smaller than the {dp.workers} workers")
        steps = len(x) // args.batch
        progress = common.Progress(
            w,
            total=steps * args.batch * args.epochs,
            scale=dp.workers,
            unit="images",
            mode=args.progress,
            watchdog=s.report.watchdog,
        )
        step = 0
        for epoch in range(1, args.epochs + 1):
            began = time.monotonic()
            order = torch.from_numpy(np.random.default_rng([args.seed, epoch]).permutation(len(x)))
            loss_sum = correct = 0.0
            for b in range(steps):
                mine = order[b * args.batch + me * share : b * args.batch + (me + 1) * share]
                out = dp(x[mine])
                loss = torch.nn.functional.cross_entropy(out, y[mine])
                loss.backward()
                dp.step()
                loss_sum += float(loss.detach()) * len(mine)
                correct += int((out.argmax(1) == y[mine]).sum())
                step += 1
                progress.update(len(mine))
                last = epoch == args.epochs and b == steps - 1
                if args.checkpoint_dir and args.eval_freq and (step % args.eval_freq == 0 or last):
                    _checkpoint(s, w, step, epoch, last, dp)
            total = s.reducer.sum(w, [loss_sum, correct, steps * share])
            test = accuracy(model, vx, vy)[1] if common.is_leader(w) else float("nan")
            s.report.epoch(
                w,
                epoch,
                progress,
                train_loss=total[0] / total[2],
                train_acc=total[1] / total[2],
                test_acc=test,
                seconds=time.monotonic() - began,
            )
        progress.close()
        if common.is_leader(w):
            s.final = accuracy(model, vx, vy)
            if args.out:  # (every worker holds the same weights after the last step)
                write_atomic(args.out, lambda out: torch.save(model.state_dict(), out))
        dp.close()

    def finish(state, wall: float) -> list[str]:
        s = state[0]
        loss, acc = s.final
        return [f"{args.epochs} epochs in {wall:.1f} s, test loss {loss:.4f}", f"test accuracy {acc:.4f}"]

    return common.run_app("mnist", args, metrics=3, setup=setup, train=train, finish=finish)


def evaluate_main(argv: list[str] | None = None) -> int:
    """`pskv evaluate`: test every checkpoint of a `pskv run mnist --eval-freq` run once, in step order,
    as they appear; stop after the final one. Prints and writes (--out .csv or .json) step, test
    loss and accuracy; --plot draws the curve."""
    import argparse
    import csv
    import json
    from pathlib import Path

    import torch

    import pskv.torch as ptorch

    from ..checkpoint.watch import watch

    p = argparse.ArgumentParser(prog="pskv evaluate", description=(evaluate_main.__doc__ or "").split("\n")[0])
    p.add_argument("--checkpoint-dir", type=Path, required=True, help="where the run writes its checkpoints")
    p.add_argument("--data", default="fashion-mnist", help="the run's data set (its test split is used)")
    p.add_argument("--test-limit", type=int, default=0, metavar="N", help="test on the first N examples (0: all)")
    p.add_argument("--out", type=Path, metavar="FILE.csv|FILE.json", help="write the results")
    p.add_argument("--plot", type=Path, metavar="FILE.png", help="draw test accuracy and loss against step")
    p.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="give up after this many seconds without a new checkpoint (0: wait for ever)",
    )
    p.add_argument("--poll", type=float, default=0.5, help="seconds between looks at the directory")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    _, _, vx, vy = load(args.data, 1, args.test_limit)
    model = lenet5()

    def evaluate(path, manifest):
        extra = manifest.get("extra", {})
        ptorch.load_weights(model, pskv.load_checkpoint(path)[extra["table"]].values, int(extra["row"]))
        loss, acc = accuracy(model, vx, vy)
        return {"test_loss": loss, "test_acc": acc}

    def show(r: dict) -> None:
        print(f"step {r['step']:>7}  test_loss {r['test_loss']:.4f}  test_acc {r['test_acc']:.4f}", flush=True)

    results = watch(args.checkpoint_dir, evaluate, poll=args.poll, timeout=args.timeout or None, on_result=show)
    if args.out is not None:
        if args.out.suffix == ".json":
            args.out.write_text(json.dumps(results, indent=1))
        else:
            with open(args.out, "w", newline="") as f:
                writer = csv.DictWriter(f, ["step", "test_loss", "test_acc"])
                writer.writeheader()
                writer.writerows(results)
    if args.plot is not None:
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print(f"--plot {args.plot}: matplotlib is not installed; pip install 'pskv[plot]'", flush=True)
        else:
            fig, axes = plt.subplots(2, 1, sharex=True, figsize=(6, 5))
            for ax, key in zip(axes, ("test_acc", "test_loss"), strict=True):
                ax.plot([r["step"] for r in results], [r[key] for r in results], marker="o")
                ax.set_ylabel(key)
                ax.grid(alpha=0.3)
            axes[-1].set_xlabel("step")
            fig.tight_layout()
            fig.savefig(args.plot, dpi=100)
            print(f"plot: {args.plot}", flush=True)
    print(f"evaluated {len(results)} checkpoint(s); final test accuracy {results[-1]['test_acc']:.4f}", flush=True)
    return 0


def _checkpoint(s: common.Session, w: pskv.Worker, step: int, epoch: int, last: bool, dp) -> None:
    """Thread 0 of every node: a checkpoint of the weights at `step` (no pruning: an evaluator reads each)."""
    if w.thread != 0:
        return
    info = s.node.checkpoint(
        s.args.checkpoint_dir,
        extra={"step": step, "epoch": epoch, "final": last, "table": dp.table.name, "row": dp.row},
    )
    if common.is_leader(w):
        print(f"checkpoint {info.path} (step {step})", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
