"""Nodes on other machines (`pskv launch --hostfile`): the hostfile, the ssh command that starts a node
on its host, the address the coordinator binds so that those hosts reach it, and the cluster secret a
launch makes, which only this machine can read (so remote hosts need the user's own, PSKV_SECRET_FILE).
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import tempfile
from pathlib import Path

from ..config import ConfigError
from ..net.auth import new_secret
from .cluster import LOOPBACK


def read_hostfile(path: Path) -> list[str]:
    """Hosts of a hostfile: one per line, `#` comments and blank lines ignored, an optional
    ` slots=K` accepted and ignored. Raises ConfigError naming the file and line."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(
            f"cannot read hostfile {str(path)!r}: {exc.strerror}; pass a file with one host per line"
        ) from None
    hosts = []
    for lineno, line in enumerate(text.splitlines(), 1):
        host, *rest = line.split("#", 1)[0].split() or [""]
        if not host:
            continue
        bad = [word for word in rest if not _is_slots(word)]
        if host.startswith("-") or bad:
            raise ConfigError(
                f"hostfile {str(path)!r} line {lineno}: {line.strip()!r} is not "
                "'HOST' or 'HOST slots=K'; write one host per line"
            )
        hosts.append(host)
    if not hosts:
        raise ConfigError(f"hostfile {str(path)!r} names no host; write one host per line")
    return hosts


def _is_slots(word: str) -> bool:
    key, _, value = word.partition("=")
    return key == "slots" and value.isdigit() and int(value) > 0


def local_secret(hosts: list[str] | None) -> str:
    """A new cluster secret in a private directory (mode 0700, file 0600) of this machine."""
    if hosts and not all(host in LOOPBACK for host in hosts):
        raise ConfigError(
            "the hostfile names other machines, which cannot read a secret this launcher keeps in "
            "its own /tmp; make one with `pskv secret new FILE`, copy it to the same path on every "
            "host, and set PSKV_SECRET_FILE=FILE"
        )
    return str(new_secret(Path(tempfile.mkdtemp(prefix="pskv-")) / "secret"))


def coordinator_host(hosts: list[str] | None) -> str:
    """127.0.0.1 unless a hostfile names a remote host; then this machine's address."""
    if not hosts or all(host in LOOPBACK for host in hosts):
        return "127.0.0.1"
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError as exc:
        raise ConfigError(
            f"cannot resolve this machine's hostname {socket.gethostname()!r} "
            f"({exc}); pass --coordinator-host with an address the hosts can reach"
        ) from None


def ssh_argv(host: str, command: list[str], env: dict[str, str]) -> list[str]:
    ssh = shutil.which("ssh", path=env.get("PATH"))
    if ssh is None:
        raise ConfigError(
            "a hostfile was given but `ssh` is not on PATH; install an ssh client or launch without --hostfile"
        )
    remote_env = {k: v for k, v in env.items() if k.startswith("PSKV_")}
    remote_env["PYTHONUNBUFFERED"] = "1"
    assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(remote_env.items()))
    remote = f"cd {shlex.quote(os.getcwd())} && env {assignments} {shlex.join(command)}"
    return [ssh, "-o", "BatchMode=yes", host, remote]
