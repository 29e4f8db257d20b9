"""Node configuration: the one reader of the PSKV_* environment variables.

`pskv.launch` is the only writer of these variables; any cluster manager may set them instead, and
under torchrun, SLURM's srun or a Kubernetes Indexed Job their own variables stand in for the
unset ones (`environments.detect`: a PSKV_* variable that is set always wins). Every default
below carries its reason.

| variable | meaning | default |
| --- | --- | --- |
| PSKV_COORDINATOR | host:port of the coordinator | unset: a 1-node cluster in this process |
| PSKV_NUM_NODES | number of node processes | 1 |
| PSKV_RANK | this node's rank, 0..N-1 | 0 |
| PSKV_HOST | address this node binds and announces | 127.0.0.1 |
| PSKV_THREADS | default worker threads for node.run() | 1 |
| PSKV_FAILURE_TIMEOUT | seconds of silence before a peer counts as failed | 10 |
| PSKV_HEARTBEAT_INTERVAL | seconds between heartbeats | 0.5 |
| PSKV_RENDEZVOUS_TIMEOUT | seconds to wait for all nodes to join | 60 |
| PSKV_CONSISTENCY | default consistency of tables: async, bsp or ssp:S | async |
| PSKV_REQUEST_TIMEOUT | seconds a request may go without progress before it fails (RequestStalled) | 60 |
| PSKV_COLLECTIVE_TIMEOUT | seconds a table()/barrier may wait for nodes that never join (CollectiveStalled) | 600 |
| PSKV_BACKUPS | copies of each key range beyond its head; a node may die without loss (server.chain) | 0 |
| PSKV_INTENT_SYNC | seconds between two sync rounds of a table's copies of keys several nodes intend (client.intent_sync; inf: flushes only); `pskv.Relocate(intent_sync=)` sets a table's own | 0.5 |
| PSKV_JOIN | host:port of a running cluster's coordinator: join it (rank and size come from there) | unset |
| PSKV_EXTERNAL_COORDINATOR | 1: a launcher runs the coordinator at PSKV_COORDINATOR; node 0 starts none | 0 |
| PSKV_SECRET_FILE | the cluster's shared secret (net.auth: CURVE on every connection); `pskv launch` makes one | unset: unauthenticated |
| PSKV_PORT | the coordinator's port under torchrun, SLURM or Kubernetes (environments.py) | derived there |
| PSKV_COORDINATOR_HOST | Kubernetes: the coordinator's pod, JOB-0.SERVICE (environments.py) | unset |
| PSKV_METRICS_PORT | P: node r serves Prometheus metrics at http://PSKV_HOST:(P+r)/metrics (pskv.monitor) | 0: none |
| PSKV_SHARED_MEMORY | 1: the nodes of one host read and write each other's shards in shared memory (store.shm), and their messages travel over private `ipc://` files (net.auth.private_dir) without CURVE; 0: only messages, over TCP | 1 |
| PSKV_FULL_TRACEBACKS | 1: an uncaught pskv.NodeFailure prints Python's whole traceback, not one line (node.diagnostics) | 0 |
| PSKV_WAIT_LOG_INTERVAL | seconds between the "still waiting for node 1 in barrier #3" lines of a waiting collective | 30 |
| PSKV_TEST_DROP_RATE | test only: fraction of outgoing data messages dropped | 0 |
"""  # noqa: E501 - a markdown table, one row per line

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping

from .environments import detect
from .errors import ConfigError, ConsistencyError
from .options import as_consistency

__all__ = ["ConfigError", "NodeConfig", "split_address", "zmq_url"]

_PREFIX = "PSKV_"


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    coordinator: str | None = None  # None: start a private 1-node cluster (no launcher needed)
    num_nodes: int = 1
    rank: int = 0
    host: str = "127.0.0.1"  # loopback by default: never expose a port by accident
    threads: int = 1
    failure_timeout: float = 10.0  # long enough for a GC pause or a numba compile, short enough to notice
    heartbeat_interval: float = 0.5  # 20 heartbeats per failure_timeout: one lost packet is no failure
    rendezvous_timeout: float = 60.0  # ssh-started nodes and first numba compiles can take a while
    consistency: str = "async"  # Async never waits; BSP/SSP are opt-in (pskv.init(consistency=...))
    request_timeout: float = 60.0  # far beyond any healthy round trip, short enough to notice overnight
    collective_timeout: float = 600.0  # nodes legitimately reach a barrier minutes apart (rank 0 evaluates)
    external_coordinator: bool = False  # set by `pskv launch`, which runs the coordinator itself
    backups: int = 0  # 0: a dead node stops the cluster (fail fast); B: B nodes may die, one at a time
    intent_sync: float = 0.5  # copies' rounds: kge over 2 emulated hosts sent 0.73-0.83x classic's bytes at 0.5 s,
    # 0.65x at 1 s, 0.92-1.05x at 0.2 s, the loss the same to 3 digits (benchmarks/RESULTS.md, issue 35)
    restore: str | None = None  # a checkpoint (or a directory of them: the newest) the tables come back from
    join: str | None = None  # a running cluster's coordinator: join it (membership.join); rank and size come from it
    secret_file: str | None = None  # None: no authentication (a lone process, or nodes started by hand; net.auth)
    metrics_port: int = 0  # 0: no exporter (opt-in: it opens a port and a thread); P: node r at P + r
    shared_memory: bool = True  # co-located nodes share their shards: a copy instead of a message (store.shm)
    full_tracebacks: bool = False  # a NodeFailure's traceback is pskv's internals; the failing node prints the cause
    wait_log_interval: float = 30.0  # a collective that waits says for whom this often: quiet in healthy runs
    test_drop_rate: float = 0.0

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, caller: str = "pskv.init", **overrides
    ) -> NodeConfig:
        """Read PSKV_* from `environ` (default os.environ); keyword overrides win. PSKV_* variables
        that are unset (or empty) come from torchrun's, SLURM's or a Kubernetes Indexed Job's
        variables when those are present (`environments.detect`), except with PSKV_JOIN. A bad
        override's ConfigError names it as an argument of `caller` (`pskv.init(threads=0): ...`)."""
        env = os.environ if environ is None else environ
        found, mapped = _launcher(env)
        env = {**env, **mapped}
        values: dict = {}
        for field in dataclasses.fields(cls):
            raw = env.get(_PREFIX + field.name.upper())
            if raw is None or raw == "":
                continue
            values[field.name] = _parse(field, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "consistency" in values:  # an object (pskv.SSP(3)) or its text; kept as text so launch can pass it on
            try:
                values["consistency"] = as_consistency(values["consistency"]).spec
            except ConsistencyError as exc:
                where = (
                    f"{caller}(consistency={values['consistency']!r})"
                    if overrides.get("consistency") is not None
                    else "PSKV_CONSISTENCY"
                )
                raise ConfigError(f"{where}: {exc}") from None
        config = cls(**values)
        try:
            config.validate({k: caller for k, v in overrides.items() if v is not None})
        except ConfigError as exc:
            if not mapped:
                raise
            named = [name for name in sorted(mapped) if name in str(exc)] or sorted(mapped)
            raise ConfigError(f"{exc} ({found.explain(named)})") from None
        return config

    def validate(self, passed: Mapping[str, str] | None = None) -> None:
        """Raise ConfigError for the first bad setting. `passed`: field -> the call it was an
        argument of (its error names that argument, not the PSKV_* variable)."""
        passed = passed or {}

        def bad(name: str, rule: str) -> ConfigError:
            value = getattr(self, name)
            if name in passed:
                return ConfigError(
                    f"{passed[name]}({name}={value!r}): {name} {rule} (PSKV_{name.upper()} sets it "
                    "when the argument is not given)"
                )
            return ConfigError(f"PSKV_{name.upper()} is {value}; it {rule}")

        if self.join:
            split_address(self.join)
            if self.restore:
                raise ConfigError(
                    "PSKV_JOIN and PSKV_RESTORE together: a node that joins a running cluster takes "
                    "its rows from the others; restore a checkpoint when the cluster starts"
                )
        if self.num_nodes < 1:
            raise bad("num_nodes", "must be at least 1")
        if not 0 <= self.rank < self.num_nodes:
            raise ConfigError(
                f"PSKV_RANK is {self.rank} but PSKV_NUM_NODES is {self.num_nodes}; "
                f"ranks run from 0 to {self.num_nodes - 1}"
            )
        if self.num_nodes > 1 and not self.coordinator:
            raise ConfigError(
                f"PSKV_NUM_NODES is {self.num_nodes} but PSKV_COORDINATOR is not set; "
                "start the nodes with `pskv launch` or set PSKV_COORDINATOR=host:port"
            )
        if self.coordinator:
            split_address(self.coordinator)
        for name in (
            "failure_timeout",
            "heartbeat_interval",
            "rendezvous_timeout",
            "request_timeout",
            "collective_timeout",
            "wait_log_interval",
        ):
            if not 0 < getattr(self, name) < math.inf:  # also rejects nan
                raise bad(name, "must be > 0 (and finite)")
        if not self.intent_sync > 0:  # (also rejects nan)
            raise bad("intent_sync", "must be > 0 seconds between two sync rounds of intent copies (inf: flushes only)")
        if not 0 <= self.test_drop_rate <= 1:
            raise bad("test_drop_rate", "must be in [0, 1]")
        if not 0 <= self.metrics_port < 65536:
            raise ConfigError(
                f"PSKV_METRICS_PORT is {self.metrics_port}; give a TCP port (node r serves at it + r), "
                "or 0 for no metrics"
            )
        if self.threads < 1:
            raise bad("threads", "must be at least 1")
        if self.backups < 0:
            raise bad("backups", "must be 0 (no backups) or more")
        if self.backups >= self.num_nodes > 1:
            raise ConfigError(
                f"PSKV_BACKUPS is {self.backups} on {self.num_nodes} node(s); a key range can have at "
                f"most {self.num_nodes - 1} backup(s) (one on each other node)"
            )

    def to_env(self) -> dict[str, str]:
        """The PSKV_* variables that describe this config (used by pskv.launch)."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None and value != field.default:
                out[_PREFIX + field.name.upper()] = str(int(value)) if isinstance(value, bool) else str(value)
        return out


def _launcher(env: Mapping[str, str]):
    """(the launcher environment found, the PSKV_* values it gives that `env` leaves unset)."""
    per_node = ("COORDINATOR", "RANK", "NUM_NODES", "HOST")
    if env.get(_PREFIX + "JOIN") or all(env.get(_PREFIX + name) for name in per_node):
        return None, {}  # a joining node gets rank and size from the cluster; `pskv launch` sets them all
    found = detect(env)
    if found is None:
        return None, {}
    return found, {k: v for k, v in found.values.items() if not env.get(k)}


def split_address(address: str) -> tuple[str, int]:
    """'host:port' or '[::1]:port' -> (host, port); raises ConfigError on anything else."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"address {address!r} is not host:port with a port in 1..65535 (e.g. 127.0.0.1:5100)")
    return host.strip("[]"), int(port)


def zmq_url(host: str, port: int) -> str:
    """tcp:// URL for host and port; IPv6 literals get brackets."""
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


def _parse(field: dataclasses.Field, raw: str):
    kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    if kind.startswith("bool"):
        if raw.lower() in ("1", "true", "yes"):
            return True
        if raw.lower() in ("0", "false", "no"):
            return False
        raise ConfigError(f"{_PREFIX}{field.name.upper()}={raw!r} is not a boolean; use 1 or 0")
    try:
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
    except ValueError:
        raise ConfigError(f"{_PREFIX}{field.name.upper()}={raw!r} is not a number") from None
    return raw
