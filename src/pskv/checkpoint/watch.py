"""Follow a checkpoint directory while a run writes into it: each complete checkpoint once, in step
order, until the final one (`pskv evaluate`, the PyTorch parameter server's evaluator process).

A checkpoint counts once its manifest.json is in place, which pskv renames there last, after every
file is fsynced: a half-written checkpoint is never read. The run marks its last checkpoint with
`extra={"final": True}`; `watch` returns after that one. It polls the directory (no other
process needs to know about the evaluator); a checkpoint that vanishes before or while it is read
(the run prunes with keep=N) is reported and skipped: the watch goes on with the newer ones.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import CheckpointError
from .format import MANIFEST, read_manifest, steps


def watch(
    directory,
    evaluate: Callable[[Path, dict], dict],
    *,
    poll: float = 0.5,
    timeout: float | None = 600.0,
    on_result: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Call `evaluate(path, manifest)` for each complete checkpoint under `directory`, once each,
    oldest step first, waiting for new ones; return the results after the final checkpoint.
    Each result gets `step` (the checkpoint's) unless `evaluate` set it; `on_result(result)` runs
    after each. Raises CheckpointError when no new checkpoint came for `timeout` seconds (None:
    wait for ever)."""
    directory = Path(directory)
    done: set[int] = set()
    results: list[dict] = []
    last_new = time.monotonic()
    while True:
        ready = [(step, path) for step, path, complete in steps(directory) if complete and step not in done]
        for step, path in ready:
            done.add(step)
            manifest = None
            try:
                manifest = read_manifest(path)
                result = {"step": int(manifest.get("extra", {}).get("step", step)), **evaluate(path, manifest)}
            except Exception as exc:  # re-raised unless the run pruned the checkpoint meanwhile
                if not _pruned(directory, step, path, manifest):
                    raise
                print(
                    f"pskv evaluate: {path.name} was removed (keep= of the run) while it was read "
                    f"({type(exc).__name__}: {exc}); skipped, going on with the newer ones",
                    file=sys.stderr,
                )
                continue
            results.append(result)
            if on_result is not None:
                on_result(result)
            if manifest.get("extra", {}).get("final"):
                return results
        if ready:
            last_new = time.monotonic()
        elif timeout is not None and time.monotonic() - last_new > timeout:
            raise CheckpointError(
                f"no new checkpoint in {directory} for {timeout:g} s and none marked final "
                f"({len(done)} evaluated); is the run still writing? (--timeout)"
            )
        time.sleep(poll)


def _pruned(directory: Path, step: int, path: Path, manifest: dict | None) -> bool:
    """Checkpoint `path` was complete and is being removed: its directory or manifest is gone, or
    files it names are while a newer complete checkpoint exists (prune removes files in any order;
    the newest is never pruned, so missing files there mean damage, which is raised)."""
    if not (path / MANIFEST).is_file():
        return True
    names = (manifest or {}).get("files", {})
    if not any(not (path / name).is_file() for name in names):
        return False
    return any(s > step and complete for s, _, complete in steps(directory))
