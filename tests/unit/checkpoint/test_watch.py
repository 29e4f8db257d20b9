"""checkpoint/watch.py: every checkpoint evaluated once, in step order, with a fast writer and a slow
evaluator and the reverse, while a real node writes them."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from pskv.checkpoint.watch import watch
from pskv.errors import CheckpointError

pytestmark = pytest.mark.timeout(60)


def _writer(node, directory, count: int, pause: float) -> threading.Thread:
    table = node.table("w", rows=4, dim=1)

    def write() -> None:
        for i in range(1, count + 1):
            table.push([0], np.ones((1, 1), np.float32)).wait(10)
            node.checkpoint(directory, extra={"step": i * 10, "final": i == count})
            time.sleep(pause)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


@pytest.mark.parametrize("write_pause,eval_pause", [(0.0, 0.15), (0.15, 0.0)], ids=["slow-evaluator", "slow-writer"])
def test_every_checkpoint_is_evaluated_once_in_step_order(node, tmp_path, write_pause, eval_pause):
    import pskv

    seen = []

    def evaluate(path, manifest):
        time.sleep(eval_pause)
        value = float(pskv.load_checkpoint(path)["w"].values[0, 0])  # a whole checkpoint: every push in it
        seen.append(manifest["extra"]["step"])
        return {"value": value}

    writer = _writer(node, tmp_path, 6, write_pause)
    results = watch(tmp_path, evaluate, poll=0.02, timeout=30)
    writer.join(10)
    assert [r["step"] for r in results] == seen == [10, 20, 30, 40, 50, 60]
    assert [r["value"] for r in results] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_no_final_checkpoint_times_out_with_a_clear_error(tmp_path):
    (tmp_path / "checkpoint-000001").mkdir()  # incomplete: no manifest, never read
    with pytest.raises(CheckpointError, match=r"no new checkpoint in .* for 0.2 s and none marked final \(0 evaluated\)"):
        watch(tmp_path, lambda p, m: {}, poll=0.02, timeout=0.2)
