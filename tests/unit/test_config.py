"""config.py: NodeConfig.from_env reads PSKV_*, validates, and to_env writes it back."""

from __future__ import annotations

import dataclasses

import pytest

from pskv.config import ConfigError, NodeConfig, split_address, zmq_url
from pskv.errors import PskvError

pytestmark = pytest.mark.timeout(60)

FULL_ENV = {
    "PSKV_COORDINATOR": "10.0.0.7:5100", "PSKV_NUM_NODES": "4", "PSKV_RANK": "3", "PSKV_HOST": "10.0.0.9",
    "PSKV_THREADS": "8", "PSKV_FAILURE_TIMEOUT": "2.5", "PSKV_HEARTBEAT_INTERVAL": "0.1",
    "PSKV_RENDEZVOUS_TIMEOUT": "30", "PSKV_TEST_DROP_RATE": "0.25",
}


def test_from_env_empty_is_private_one_node_cluster():
    """No PSKV_* at all: the defaults, a 1-node cluster with no coordinator address."""
    cfg = NodeConfig.from_env({})
    assert cfg == NodeConfig()
    assert (cfg.coordinator, cfg.num_nodes, cfg.rank, cfg.host) == (None, 1, 0, "127.0.0.1")


def test_from_env_parses_every_variable():
    """Every PSKV_* variable lands in its field with the field's type."""
    cfg = NodeConfig.from_env(FULL_ENV)
    assert cfg == NodeConfig(coordinator="10.0.0.7:5100", num_nodes=4, rank=3, host="10.0.0.9", threads=8,
                             failure_timeout=2.5, heartbeat_interval=0.1, rendezvous_timeout=30.0,
                             test_drop_rate=0.25)
    assert isinstance(cfg.num_nodes, int) and isinstance(cfg.rendezvous_timeout, float)


def test_from_env_empty_values_mean_default():
    """A variable set to the empty string counts as unset."""
    assert NodeConfig.from_env({"PSKV_RANK": "", "PSKV_COORDINATOR": "", "PSKV_THREADS": ""}) == NodeConfig()


def test_from_env_ignores_other_variables():
    """Variables without the PSKV_ prefix, or unknown PSKV_ names, change nothing."""
    assert NodeConfig.from_env({"RANK": "3", "NUM_NODES": "4", "PSKV_UNKNOWN": "x"}) == NodeConfig()


def test_from_env_overrides_win():
    """Keyword overrides take precedence over the environment; None overrides are ignored."""
    cfg = NodeConfig.from_env(FULL_ENV, rank=1, threads=2, coordinator=None, failure_timeout=1)
    assert (cfg.rank, cfg.threads, cfg.coordinator, cfg.failure_timeout) == (1, 2, "10.0.0.7:5100", 1)


def test_from_env_defaults_to_os_environ(monkeypatch):
    """With no mapping, from_env reads os.environ."""
    monkeypatch.setenv("PSKV_THREADS", "5")
    assert NodeConfig.from_env().threads == 5


@pytest.mark.parametrize("env, match", [
    ({"PSKV_NUM_NODES": "2", "PSKV_RANK": "2", "PSKV_COORDINATOR": "h:1"}, "PSKV_RANK is 2 but PSKV_NUM_NODES is 2"),
    ({"PSKV_NUM_NODES": "3", "PSKV_RANK": "7", "PSKV_COORDINATOR": "h:1"}, "ranks run from 0 to 2"),
    ({"PSKV_RANK": "-1"}, "PSKV_RANK is -1"),
    ({"PSKV_NUM_NODES": "0"}, "PSKV_NUM_NODES is 0; it must be at least 1"),
    ({"PSKV_NUM_NODES": "2"}, "PSKV_NUM_NODES is 2 but PSKV_COORDINATOR is not set"),
    ({"PSKV_THREADS": "0"}, "PSKV_THREADS is 0"),
    ({"PSKV_FAILURE_TIMEOUT": "0"}, "PSKV_FAILURE_TIMEOUT is 0.0; it must be > 0"),
    ({"PSKV_HEARTBEAT_INTERVAL": "-1"}, "PSKV_HEARTBEAT_INTERVAL is -1.0"),
    ({"PSKV_RENDEZVOUS_TIMEOUT": "0"}, "PSKV_RENDEZVOUS_TIMEOUT is 0.0"),
])
def test_from_env_invalid_values_raise(env, match):
    """Inconsistent or out-of-range values are a ConfigError naming the variable and its value."""
    with pytest.raises(ConfigError, match=match):
        NodeConfig.from_env(env)


@pytest.mark.parametrize("overrides, message", [
    ({"threads": 0}, "pskv.init(threads=0): threads must be at least 1 (PSKV_THREADS sets it when the argument is "
                     "not given)"),
    ({"failure_timeout": -1.0}, "pskv.init(failure_timeout=-1.0): failure_timeout must be > 0 (and finite) "
                                "(PSKV_FAILURE_TIMEOUT sets it when the argument is not given)"),
])
def test_from_env_bad_override_names_the_argument(overrides, message):
    """A bad keyword of pskv.init() is blamed on that keyword, not on the PSKV_* variable (issue 33)."""
    with pytest.raises(ConfigError) as info:
        NodeConfig.from_env({"PSKV_THREADS": "2"}, **overrides)
    assert str(info.value) == message


def test_from_env_bad_consistency_override_names_the_argument():
    """pskv.init(consistency='foo') names the argument."""
    with pytest.raises(ConfigError, match=r"^pskv.init\(consistency='foo'\): unknown consistency 'foo'"):
        NodeConfig.from_env({}, consistency="foo")


@pytest.mark.parametrize("address", ["localhost", "127.0.0.1", ":5100", "host:", "host:port", "host:-1",
                                     "host:51 00"])
def test_from_env_bad_coordinator_address_raises(address):
    """PSKV_COORDINATOR that is not host:port is a ConfigError quoting it."""
    with pytest.raises(ConfigError, match="is not host:port"):
        NodeConfig.from_env({"PSKV_COORDINATOR": address})


def test_from_env_port_out_of_range_raises():
    """A coordinator port above 65535 is a ConfigError, not a silently different port."""
    with pytest.raises(ConfigError):
        NodeConfig.from_env({"PSKV_COORDINATOR": "127.0.0.1:99999"})


def test_from_env_nan_timeout_raises():
    """PSKV_FAILURE_TIMEOUT=nan is a ConfigError, like 0 or a negative number."""
    with pytest.raises(ConfigError):
        NodeConfig.from_env({"PSKV_FAILURE_TIMEOUT": "nan"})


@pytest.mark.parametrize("name, raw", [("PSKV_NUM_NODES", "two"), ("PSKV_RANK", "1.5"), ("PSKV_THREADS", "4x"),
                                       ("PSKV_FAILURE_TIMEOUT", "ten"), ("PSKV_HEARTBEAT_INTERVAL", "0,5")])
def test_from_env_non_numeric_raises(name, raw):
    """A non-numeric value for a numeric variable is a ConfigError quoting the variable and the value."""
    with pytest.raises(ConfigError, match=f"{name}={raw!r} is not a number"):
        NodeConfig.from_env({name: raw})


def test_config_error_is_pskverror_and_valueerror():
    """ConfigError is both a PskvError and a ValueError."""
    assert issubclass(ConfigError, PskvError) and issubclass(ConfigError, ValueError)


def test_to_env_round_trip():
    """from_env(to_env(cfg)) == cfg for a config with every field changed."""
    cfg = NodeConfig.from_env(FULL_ENV)
    env = cfg.to_env()
    assert env.keys() == FULL_ENV.keys() and env["PSKV_RENDEZVOUS_TIMEOUT"] == "30.0"
    assert NodeConfig.from_env(env) == cfg


def test_to_env_writes_only_non_defaults():
    """to_env of the default config is empty; one changed field gives one variable."""
    assert NodeConfig().to_env() == {}
    assert dataclasses.replace(NodeConfig(), threads=3).to_env() == {"PSKV_THREADS": "3"}


def test_config_is_frozen():
    """NodeConfig is immutable."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        NodeConfig().rank = 1


@pytest.mark.parametrize("address, expected", [("127.0.0.1:5100", ("127.0.0.1", 5100)), ("[::1]:7000", ("::1", 7000)),
                                               ("node-3.cluster:1", ("node-3.cluster", 1))])
def test_split_address_valid(address, expected):
    """host:port and [ipv6]:port split into (host, int port)."""
    assert split_address(address) == expected


def test_zmq_url_brackets_ipv6():
    """IPv6 hosts get brackets in the tcp:// URL, IPv4 hosts do not."""
    assert zmq_url("127.0.0.1", 5) == "tcp://127.0.0.1:5"
    assert zmq_url("::1", 5) == "tcp://[::1]:5"


def test_torchrun_variables_describe_the_cluster_unless_pskv_ones_do():
    torchrun = {"RANK": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}
    cfg = NodeConfig.from_env(torchrun)
    assert (cfg.coordinator, cfg.rank, cfg.num_nodes, cfg.host) == ("127.0.0.1:29501", 1, 3, "127.0.0.1")
    cfg = NodeConfig.from_env({**torchrun, "MASTER_ADDR": "10.0.0.5", "PSKV_HOST": "10.0.0.9"})
    assert (cfg.coordinator, cfg.host) == ("10.0.0.5:29501", "10.0.0.9")  # unset: the route there (test_environments)
    cfg = NodeConfig.from_env({**torchrun, "PSKV_COORDINATOR": "127.0.0.1:7000", "PSKV_RANK": "0", "PSKV_NUM_NODES": "2"})
    assert (cfg.coordinator, cfg.rank, cfg.num_nodes) == ("127.0.0.1:7000", 0, 2)
    with pytest.raises(ConfigError, match="MASTER_PORT='x' .torchrun. is not a port number"):
        NodeConfig.from_env({**torchrun, "MASTER_PORT": "x"})
