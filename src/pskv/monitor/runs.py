"""Where `pskv top` finds the running clusters of this machine: one small JSON file per launcher.

    pskv launch -n 2 --metrics 9100 -- python examples/quickstart.py &
    pskv top                        # finds the run above by its file, no ports to type

A launcher that starts nodes with metrics (pskv launch --metrics P, or PSKV_METRICS_PORT=P pskv run)
writes TMPDIR/pskv-runs-UID/run-PID.json (the directory mode 0700: this user's runs only):

    {"pid": launcher PID, "started": epoch seconds, "command": "...", "metrics_port": P, "urls": [...]}

and removes it at shutdown. A launcher killed with SIGKILL leaves its file; `live()` skips files whose
PID runs no more. Standard library only. Threads and ownership: none; each call reads the directory.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path


def directory() -> Path:
    """This user's directory of run files (TMPDIR, else /tmp, then pskv-runs-UID)."""
    return Path(tempfile.gettempdir()) / f"pskv-runs-{os.getuid()}"


def register(urls: list[str], command: str, metrics_port: int) -> Path | None:
    """Write this process's run file (atomically); returns its path, or None when it cannot be written
    (`pskv top` then needs --metrics-port; the run itself goes on)."""
    folder = directory()
    path = folder / f"run-{os.getpid()}.json"
    record = {
        "pid": os.getpid(),
        "started": time.time(),
        "command": command,
        "metrics_port": metrics_port,
        "urls": list(urls),
    }
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def live() -> list[dict]:
    """The run files of launchers that still run, newest first."""
    runs = []
    for path in directory().glob("run-*.json"):
        try:
            record = json.loads(path.read_text())
            pid = int(record["pid"])
            if not isinstance(record.get("urls"), list):
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if _running(pid):
            runs.append(record)
    return sorted(runs, key=lambda r: r.get("started", 0), reverse=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's PID now: not our launcher
        return False
    return True
