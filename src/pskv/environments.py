"""The clusters other launchers describe (torchrun, SLURM, a Kubernetes Indexed Job), as PSKV_* values.

Try it: `SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_NODELIST=localhost SLURM_JOB_ID=7 python -c
"import pskv.config as c; print(c.NodeConfig.from_env())"`

`detect(env)` recognises at most one environment, the first of this table that is present, and
returns the PSKV_* values it implies; `NodeConfig.from_env` (the only caller) lets every PSKV_*
variable that is set win over the value mapped for it, and maps nothing when PSKV_JOIN is set.

| environment | present when set | rank | nodes | coordinator |
| --- | --- | --- | --- | --- |
| torchrun | RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT | RANK | WORLD_SIZE | MASTER_ADDR : MASTER_PORT + 1 |
| SLURM (srun) | SLURM_PROCID, SLURM_NTASKS | SLURM_PROCID | SLURM_NTASKS | first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST) : slurm_port() |
| Kubernetes Indexed Job | JOB_COMPLETION_INDEX | JOB_COMPLETION_INDEX | PSKV_NUM_NODES (the YAML sets it) | PSKV_COORDINATOR_HOST : PSKV_PORT (default 5100); node 0: its own address |

torchrun comes first because `srun torchrun ...` runs torchrun's processes inside a SLURM step, and
each of them is one of torchrun's ranks, not one of SLURM's tasks. PSKV_PORT, when set, is the
coordinator's port under every launcher. Node 0 runs the coordinator (no launcher process runs one).
PSKV_HOST, the address a node binds and announces, is 127.0.0.1 when the coordinator's host is
loopback, and otherwise this machine's address on the route to the coordinator (the pod's own
address under Kubernetes, where the coordinator's name may not resolve before its pod runs).
Host names are resolved here because ZeroMQ binds only to addresses, never to names.
"""  # noqa: E501 - a markdown table, one row per line

from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket
from collections.abc import Mapping

from .errors import ConfigError

__all__ = ["Found", "Network", "detect", "expand_hostlist", "slurm_port"]

_TORCHRUN = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_SLURM_PORT_BASE = 11000  # derived SLURM ports lie in [11000, 31000): above the well-known ports and
_SLURM_PORT_SPAN = 20000  # below Linux's ephemeral range (32768-60999), from which the OS picks ports
_SLURM_STEPS = 16  # steps of one job running at once (srun ... & srun ...) get different ports
_K8S_PORT = 5100  # a pod has its own network namespace: a fixed port collides with nothing
_MAX_HOSTS = 100_000  # a longer range in a host list is a typo (node[1-1000000]), not a cluster


@dataclasses.dataclass(frozen=True)
class Found:
    """An environment `detect` recognised: its name, the PSKV_* values it implies, and for each
    of them the variables it came from (for error messages)."""

    name: str
    values: dict[str, str]
    origin: dict[str, str]

    def explain(self, names: list[str]) -> str:
        """'under SLURM, PSKV_RANK came from SLURM_PROCID, ...' for the PSKV_* `names` it supplied."""
        sources = ", ".join(f"{name} came from {self.origin[name]}" for name in names if name in self.origin)
        return f"under {self.name}, {sources}; a PSKV_* variable you set overrides what a launcher implies"


class Network:
    """Name resolution and routing; tests pass a fake with the same three methods."""

    def address_of(self, name: str) -> str:
        """The IP address of host `name` (itself when it is one). Raises ConfigError if it does not resolve."""
        if _is_ip(name):
            return name
        try:
            return socket.gethostbyname(name)
        except OSError as exc:
            raise ConfigError(
                f"host {name!r} does not resolve ({exc}); set PSKV_COORDINATOR=ADDRESS:PORT and "
                "PSKV_HOST to this machine's address"
            ) from None

    def route_to(self, address: str) -> str:
        """This machine's address on the route to `address` (a UDP connect sends no packet)."""
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((address, 9))
                return sock.getsockname()[0]
        except OSError as exc:
            raise ConfigError(
                f"no route from this machine to the coordinator at {address} ({exc}); "
                "set PSKV_HOST to this machine's address"
            ) from None

    def this_host(self) -> str:
        """The address this machine's own name resolves to (a pod's IP under Kubernetes)."""
        return self.address_of(socket.gethostname())


def detect(env: Mapping[str, str], network: Network | None = None) -> Found | None:
    """The first launcher environment present in `env` (torchrun, SLURM, Kubernetes), mapped to
    PSKV_* values, or None. Raises ConfigError naming the launcher's variables when they are
    malformed or disagree (SLURM_PROCID >= SLURM_NTASKS)."""
    network = network or Network()
    if all(env.get(name) for name in _TORCHRUN):
        return _torchrun(env, network)
    if env.get("SLURM_PROCID") and env.get("SLURM_NTASKS"):
        return _slurm(env, network)
    if env.get("JOB_COMPLETION_INDEX"):
        return _kubernetes(env, network)
    return None


def _torchrun(env: Mapping[str, str], network: Network) -> Found:
    rank, size = _rank_and_size(env, "RANK", "WORLD_SIZE", "torchrun")
    port = _port(env) or _int(env, "MASTER_PORT", "torchrun", "a port number") + 1
    values = {"PSKV_RANK": str(rank), "PSKV_NUM_NODES": str(size), **_placement(env["MASTER_ADDR"], port, env, network)}
    origin = {
        "PSKV_RANK": "RANK",
        "PSKV_NUM_NODES": "WORLD_SIZE",
        "PSKV_COORDINATOR": "MASTER_ADDR and MASTER_PORT + 1",
        "PSKV_HOST": "the route to MASTER_ADDR",
    }
    return Found("torchrun", values, origin)


def _slurm(env: Mapping[str, str], network: Network) -> Found:
    rank, size = _rank_and_size(env, "SLURM_PROCID", "SLURM_NTASKS", "SLURM")
    list_name = "SLURM_STEP_NODELIST" if env.get("SLURM_STEP_NODELIST") else "SLURM_JOB_NODELIST"
    if not env.get(list_name):
        raise ConfigError(
            "SLURM_PROCID and SLURM_NTASKS are set but neither SLURM_STEP_NODELIST nor "
            "SLURM_JOB_NODELIST; start the nodes with srun, or set PSKV_COORDINATOR=HOST:PORT"
        )
    first = expand_hostlist(env[list_name], list_name)[0]
    values = {"PSKV_RANK": str(rank), "PSKV_NUM_NODES": str(size), **_placement(first, slurm_port(env), env, network)}
    origin = {
        "PSKV_RANK": "SLURM_PROCID",
        "PSKV_NUM_NODES": "SLURM_NTASKS",
        "PSKV_COORDINATOR": f"the first host of {list_name} ({first}) and PSKV_PORT or SLURM_JOB_ID",
        "PSKV_HOST": f"the route to {first}",
    }
    return Found("SLURM", values, origin)


def _kubernetes(env: Mapping[str, str], network: Network) -> Found:
    rank = _int(env, "JOB_COMPLETION_INDEX", "Kubernetes", "a number >= 0")
    if not env.get("PSKV_NUM_NODES"):
        raise ConfigError(
            f"JOB_COMPLETION_INDEX={rank} (a Kubernetes Indexed Job) but PSKV_NUM_NODES is not set; "
            "set it to the Job's completions in the pod's env (see examples/k8s/pskv-job.yaml)"
        )
    size = _int(env, "PSKV_NUM_NODES", "Kubernetes", "a number >= 1")
    if not 0 <= rank < size:
        raise ConfigError(
            f"JOB_COMPLETION_INDEX={rank} but PSKV_NUM_NODES={size}: indexes run from 0 to "
            f"{size - 1}; set PSKV_NUM_NODES to the Job's completions"
        )
    port = _port(env) or _K8S_PORT
    host = env.get("PSKV_HOST") or network.this_host()
    if rank == 0:  # it runs the coordinator; ZeroMQ binds addresses, and its own name may not resolve yet
        coordinator = f"{_bracketed(host)}:{port}"
    elif env.get("PSKV_COORDINATOR_HOST"):
        coordinator = f"{_bracketed(env['PSKV_COORDINATOR_HOST'])}:{port}"  # a name: ZeroMQ resolves it, retrying
    else:
        raise ConfigError(
            f"JOB_COMPLETION_INDEX={rank} (a Kubernetes Indexed Job) but PSKV_COORDINATOR_HOST is not "
            "set; set it to JOB-0.SERVICE, the first pod of the Job under its headless Service"
        )
    values = {"PSKV_RANK": str(rank), "PSKV_COORDINATOR": coordinator, "PSKV_HOST": host}
    origin = {
        "PSKV_RANK": "JOB_COMPLETION_INDEX",
        "PSKV_HOST": "this pod's host name",
        "PSKV_COORDINATOR": "this pod's address" if rank == 0 else "PSKV_COORDINATOR_HOST and PSKV_PORT",
    }
    return Found("Kubernetes", values, origin)


def slurm_port(env: Mapping[str, str]) -> int:
    """The coordinator's port under SLURM: PSKV_PORT, else derived from SLURM_JOB_ID and
    SLURM_STEP_ID, so that concurrent jobs (and up to 16 concurrent steps of one job) on one host
    do not collide: 11000 + (16 * job + step mod 16) mod 20000."""
    port = _port(env)
    if port:
        return port
    if not env.get("SLURM_JOB_ID", "").isdigit():
        raise ConfigError(
            f"SLURM_JOB_ID={env.get('SLURM_JOB_ID')!r} is not a job number, so no coordinator port "
            "can be derived from it; set PSKV_PORT to a free port"
        )
    step = int(env["SLURM_STEP_ID"]) if env.get("SLURM_STEP_ID", "").isdigit() else 0
    return _SLURM_PORT_BASE + (int(env["SLURM_JOB_ID"]) * _SLURM_STEPS + step % _SLURM_STEPS) % _SLURM_PORT_SPAN


def expand_hostlist(text: str, where: str = "host list") -> list[str]:
    """SLURM's compressed host list, expanded in order: 'node[01-03,07],gpu5' -> node01, node02,
    node03, node07, gpu5. Zero padding follows the lower bound; several bracket groups in one name
    multiply out (rack[1-2]-n[1-2]). Raises ConfigError naming `where` on anything malformed."""
    hosts: list[str] = []
    for item in _split_top_level(text, where):
        if not item:
            raise ConfigError(f"{where}={text!r} has an empty host name; expected e.g. node[01-03,07],gpu5")
        hosts.extend(_expand_name(item, text, where))
        if len(hosts) > _MAX_HOSTS:
            raise ConfigError(f"{where}={text!r} names more than {_MAX_HOSTS} hosts; check its ranges")
    return hosts


def _split_top_level(text: str, where: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
        if depth not in (0, 1):
            raise ConfigError(
                f"{where}={text!r} has unbalanced or nested brackets at position {i}; expected e.g. node[01-03,07],gpu5"
            )
    if depth:
        raise ConfigError(f"{where}={text!r} has a '[' that is never closed; expected e.g. node[01-03,07],gpu5")
    items.append(text[start:].strip())
    return items


_GROUP = re.compile(r"([^\[\]]*)\[([^\[\]]*)\](.*)")


def _expand_name(item: str, text: str, where: str) -> list[str]:
    match = _GROUP.fullmatch(item)
    if match is None:
        return [item]
    prefix, ranges, rest = match.groups()
    tails = _expand_name(rest, text, where) if rest else [""]
    return [prefix + number + tail for number in _numbers(ranges, text, where) for tail in tails]


def _numbers(ranges: str, text: str, where: str) -> list[str]:
    """'01-03,07' -> ['01', '02', '03', '07']."""
    out = []
    for part in ranges.split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ConfigError(f"{where}={text!r}: [{ranges}] is not a list of numbers and ranges like 01-03,07")
        if not dash:
            out.append(lo)
            continue
        if int(hi) < int(lo) or int(hi) - int(lo) >= _MAX_HOSTS:
            raise ConfigError(f"{where}={text!r}: the range {lo}-{hi} runs backwards or is too long")
        out.extend(str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1))
    return out


def _rank_and_size(env: Mapping[str, str], rank_name: str, size_name: str, launcher: str) -> tuple[int, int]:
    rank = _int(env, rank_name, launcher, "a number >= 0")
    size = _int(env, size_name, launcher, "a number >= 1")
    if size < 1:
        raise ConfigError(f"{size_name}={env[size_name]!r} ({launcher}) is not a number >= 1")
    if not 0 <= rank < size:
        raise ConfigError(
            f"{rank_name}={rank} but {size_name}={size} ({launcher}): ranks run from 0 to "
            f"{size - 1}; start the processes with {launcher}, or set PSKV_RANK and PSKV_NUM_NODES"
        )
    return rank, size


def _int(env: Mapping[str, str], name: str, launcher: str, what: str) -> int:
    raw = env[name].strip()
    if not raw.isdigit():
        raise ConfigError(f"{name}={env[name]!r} ({launcher}) is not {what}")
    return int(raw)


def _port(env: Mapping[str, str]) -> int | None:
    """PSKV_PORT, if set; raises ConfigError when it is not a port number."""
    raw = env.get("PSKV_PORT", "")
    if not raw:
        return None
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"PSKV_PORT={raw!r} is not a port number in 1..65535")
    return int(raw)


def _placement(name: str, port: int, env: Mapping[str, str], network: Network) -> dict[str, str]:
    """PSKV_COORDINATOR (node 0 binds it: an address) and PSKV_HOST for a coordinator on host
    `name`; no route is looked up when PSKV_HOST is set (it wins anyway)."""
    address = "127.0.0.1" if name == "localhost" else network.address_of(name.strip("[]"))
    if env.get("PSKV_HOST"):
        host = env["PSKV_HOST"]
    else:
        host = "127.0.0.1" if ipaddress.ip_address(address).is_loopback else network.route_to(address)
    return {"PSKV_COORDINATOR": f"{_bracketed(address)}:{port}", "PSKV_HOST": host}


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
