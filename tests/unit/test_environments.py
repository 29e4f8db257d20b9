"""environments.py: torchrun's, SLURM's and a Kubernetes Indexed Job's variables as PSKV_* values,
SLURM host lists, and NodeConfig.from_env's precedence (a PSKV_* variable that is set wins)."""

from __future__ import annotations

import pytest

from pskv.config import ConfigError, NodeConfig
from pskv.environments import Network, detect, expand_hostlist, slurm_port

pytestmark = pytest.mark.timeout(60)

SLURM = {"SLURM_PROCID": "1", "SLURM_NTASKS": "3", "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_ID": "4242"}
TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "localhost", "MASTER_PORT": "29500"}
K8S = {"JOB_COMPLETION_INDEX": "1", "PSKV_NUM_NODES": "3", "PSKV_COORDINATOR_HOST": "pskv-0.pskv"}


class FakeNetwork(Network):
    """Names resolve from a table; this machine is 10.1.0.3 (the route to anywhere) or 10.2.0.5 (a pod)."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def address_of(self, name: str) -> str:
        self.asked.append(name)
        table = {"node01": "10.1.0.1", "gpu5": "10.1.0.9", "head": "10.1.0.7", "10.1.0.7": "10.1.0.7"}
        if name not in table:
            raise ConfigError(f"host {name!r} does not resolve")
        return table[name]

    def route_to(self, address: str) -> str:
        return "10.1.0.3"

    def this_host(self) -> str:
        return "10.2.0.5"


# --- SLURM host lists ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, hosts", [
    ("node[01-03,07],gpu5", ["node01", "node02", "node03", "node07", "gpu5"]),
    ("localhost", ["localhost"]),
    ("n[9-11]", ["n9", "n10", "n11"]),
    ("n[009-011]", ["n009", "n010", "n011"]),
    ("n[7]", ["n7"]),
    ("gpu5,node[1-2]", ["gpu5", "node1", "node2"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("n[1-2]x,n[05]", ["n1x", "n2x", "n05"]),
    ("a-b.example.org,c", ["a-b.example.org", "c"]),
])
def test_expand_hostlist_compressed_forms(text, hosts):
    """Ranges keep the lower bound's zero padding; groups multiply out; order is SLURM's."""
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, match", [
    ("", "has an empty host name"),
    ("a,,b", "has an empty host name"),
    ("node[01-03", "a '\\[' that is never closed"),
    ("node01-03]", "unbalanced or nested brackets at position 9"),
    ("n[[1]]", "unbalanced or nested brackets at position 2"),
    ("n[a-b]", "\\[a-b\\] is not a list of numbers"),
    ("n[]", "\\[\\] is not a list of numbers"),
    ("n[1-]", "\\[1-\\] is not a list of numbers"),
    ("n[3-1]", "the range 3-1 runs backwards or is too long"),
    ("n[0-99999999]", "the range 0-99999999 runs backwards or is too long"),
])
def test_expand_hostlist_malformed_is_config_error(text, match):
    """A malformed list is a ConfigError quoting the variable and the list."""
    with pytest.raises(ConfigError, match=match) as info:
        expand_hostlist(text, "SLURM_STEP_NODELIST")
    assert str(info.value).startswith(f"SLURM_STEP_NODELIST={text!r}")


# --- SLURM -----------------------------------------------------------------------------------------

def test_slurm_srun_task_on_loopback():
    """srun's task 1 of 3 on localhost: rank, size and a coordinator port derived from the job id."""
    cfg = NodeConfig.from_env(SLURM)
    assert (cfg.rank, cfg.num_nodes, cfg.coordinator, cfg.host) == (1, 3, "127.0.0.1:18872", "127.0.0.1")


def test_slurm_port_from_job_and_step_or_pskv_port():
    """11000 + (16 * job + step mod 16) mod 20000, below the ephemeral ports; PSKV_PORT wins."""
    assert slurm_port({"SLURM_JOB_ID": "4242"}) == 11000 + 4242 * 16 % 20000 == 18872
    assert slurm_port({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"}) == 18875
    assert slurm_port({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "19"}) == 18875  # 19 mod 16
    assert slurm_port({"SLURM_JOB_ID": "4243"}) == 18888
    assert slurm_port({"SLURM_JOB_ID": "1250"}) == 11000  # 20000 mod 20000
    assert slurm_port({"SLURM_JOB_ID": "4242", "PSKV_PORT": "6000"}) == 6000
    ports = {slurm_port({"SLURM_JOB_ID": str(job), "SLURM_STEP_ID": str(step)})
             for job in range(1000, 1100) for step in range(4)}
    assert len(ports) == 400 and min(ports) >= 11000 and max(ports) < 31000


def test_slurm_first_host_of_the_step_list_runs_the_coordinator():
    """The coordinator is the first host of SLURM_STEP_NODELIST, resolved (ZeroMQ binds addresses);
    this node announces its address on the route to it."""
    net = FakeNetwork()
    found = detect({**SLURM, "SLURM_STEP_NODELIST": "node[01-03,07],gpu5",
                    "SLURM_JOB_NODELIST": "gpu5"}, net)
    assert found.name == "SLURM"
    assert found.values == {"PSKV_RANK": "1", "PSKV_NUM_NODES": "3", "PSKV_COORDINATOR": "10.1.0.1:18872",
                            "PSKV_HOST": "10.1.0.3"}
    assert net.asked == ["node01"]


def test_slurm_job_nodelist_when_no_step_list():
    """Without SLURM_STEP_NODELIST, the job's list is used."""
    env = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_NODELIST"}
    found = detect({**env, "SLURM_JOB_NODELIST": "gpu5,node01"}, FakeNetwork())
    assert found.values["PSKV_COORDINATOR"] == "10.1.0.9:18872"


def test_slurm_pskv_variables_win_each_on_its_own():
    """Set PSKV_* variables override the SLURM mapping one by one; the rest still comes from SLURM."""
    cfg = NodeConfig.from_env({**SLURM, "PSKV_RANK": "2", "PSKV_PORT": "7001"})
    assert (cfg.rank, cfg.num_nodes, cfg.coordinator) == (2, 3, "127.0.0.1:7001")
    cfg = NodeConfig.from_env({**SLURM, "PSKV_COORDINATOR": "127.0.0.1:7000", "PSKV_HOST": "127.0.0.2"})
    assert (cfg.rank, cfg.num_nodes, cfg.coordinator, cfg.host) == (1, 3, "127.0.0.1:7000", "127.0.0.2")


def test_slurm_not_read_when_every_per_node_variable_is_set():
    """`pskv launch` inside a SLURM job sets every per-node variable: SLURM's are not even parsed."""
    env = {**SLURM, "SLURM_PROCID": "garbage", "PSKV_COORDINATOR": "127.0.0.1:7000", "PSKV_RANK": "0",
           "PSKV_NUM_NODES": "2", "PSKV_HOST": "127.0.0.1"}
    cfg = NodeConfig.from_env(env)
    assert (cfg.rank, cfg.num_nodes, cfg.coordinator) == (0, 2, "127.0.0.1:7000")


def test_join_maps_nothing():
    """A node that joins a running cluster gets rank and size from it, not from a launcher."""
    cfg = NodeConfig.from_env({**SLURM, **TORCHRUN, "PSKV_JOIN": "127.0.0.1:7000"})
    assert (cfg.rank, cfg.num_nodes, cfg.coordinator, cfg.join) == (0, 1, None, "127.0.0.1:7000")


@pytest.mark.parametrize("change, match", [
    ({"SLURM_PROCID": "3"}, r"^SLURM_PROCID=3 but SLURM_NTASKS=3 \(SLURM\): ranks run from 0 to 2; start the "
                            r"processes with SLURM, or set PSKV_RANK and PSKV_NUM_NODES$"),
    ({"SLURM_NTASKS": "0"}, r"^SLURM_NTASKS='0' \(SLURM\) is not a number >= 1$"),
    ({"SLURM_PROCID": "-1"}, r"^SLURM_PROCID='-1' \(SLURM\) is not a number >= 0$"),
    ({"SLURM_NTASKS": "two"}, r"^SLURM_NTASKS='two' \(SLURM\) is not a number >= 1$"),
    ({"SLURM_STEP_NODELIST": ""}, r"^SLURM_PROCID and SLURM_NTASKS are set but neither SLURM_STEP_NODELIST nor "
                                  r"SLURM_JOB_NODELIST"),
    ({"SLURM_STEP_NODELIST": "n[1-"}, r"^SLURM_STEP_NODELIST='n\[1-' has a '\[' that is never closed"),
    ({"SLURM_JOB_ID": ""}, r"^SLURM_JOB_ID='' is not a job number, so no coordinator port can be derived from "
                           r"it; set PSKV_PORT to a free port$"),
    ({"PSKV_PORT": "70000"}, r"^PSKV_PORT='70000' is not a port number in 1..65535$"),
])
def test_slurm_inconsistent_values_are_config_errors(change, match):
    """Malformed or inconsistent SLURM variables: a ConfigError naming them and what to do."""
    with pytest.raises(ConfigError, match=match):
        NodeConfig.from_env({**SLURM, **change})


def test_mapped_value_conflicting_with_a_set_one_says_where_it_came_from():
    """PSKV_NUM_NODES=2 beside SLURM_PROCID=2: the error names the PSKV_* check and SLURM's variable."""
    with pytest.raises(ConfigError) as info:
        NodeConfig.from_env({**SLURM, "SLURM_PROCID": "2", "PSKV_NUM_NODES": "2"})
    assert str(info.value) == (
        "PSKV_RANK is 2 but PSKV_NUM_NODES is 2; ranks run from 0 to 1 (under SLURM, PSKV_RANK came from "
        "SLURM_PROCID; a PSKV_* variable you set overrides what a launcher implies)")


# --- torchrun --------------------------------------------------------------------------------------

def test_torchrun_on_loopback():
    """RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT: node 0's coordinator beside torch's store, at port + 1."""
    cfg = NodeConfig.from_env(TORCHRUN)
    assert (cfg.rank, cfg.num_nodes, cfg.coordinator, cfg.host) == (1, 2, "127.0.0.1:29501", "127.0.0.1")
    assert NodeConfig.from_env({**TORCHRUN, "PSKV_PORT": "6000"}).coordinator == "127.0.0.1:6000"


def test_torchrun_across_machines_resolves_master_and_routes():
    """A named MASTER_ADDR is resolved for node 0's bind; every node announces its address towards it
    (before, PSKV_HOST stayed 127.0.0.1, so nodes on other machines could not reach each other)."""
    found = detect({**TORCHRUN, "MASTER_ADDR": "head"}, FakeNetwork())
    assert found.name == "torchrun"
    assert found.values == {"PSKV_RANK": "1", "PSKV_NUM_NODES": "2", "PSKV_COORDINATOR": "10.1.0.7:29501",
                            "PSKV_HOST": "10.1.0.3"}


def test_torchrun_wins_over_slurm():
    """`srun torchrun ...`: each process is one of torchrun's ranks, not one of SLURM's tasks."""
    found = detect({**SLURM, **TORCHRUN, **K8S}, FakeNetwork())
    assert (found.name, found.values["PSKV_RANK"], found.values["PSKV_NUM_NODES"]) == ("torchrun", "1", "2")
    found = detect({**SLURM, **K8S}, FakeNetwork())
    assert found.name == "SLURM"


@pytest.mark.parametrize("change, match", [
    ({"RANK": "2"}, r"^RANK=2 but WORLD_SIZE=2 \(torchrun\): ranks run from 0 to 1"),
    ({"MASTER_PORT": "x"}, r"^MASTER_PORT='x' \(torchrun\) is not a port number$"),
])
def test_torchrun_inconsistent_values_are_config_errors(change, match):
    with pytest.raises(ConfigError, match=match):
        NodeConfig.from_env({**TORCHRUN, **change})


# --- Kubernetes ------------------------------------------------------------------------------------

def test_kubernetes_indexed_job_pod():
    """JOB_COMPLETION_INDEX is the rank; pods 1.. connect to JOB-0.SERVICE by name (ZeroMQ resolves it,
    retrying until the pod exists); each pod announces its own address."""
    found = detect(K8S, FakeNetwork())
    assert found.name == "Kubernetes"
    assert found.values == {"PSKV_RANK": "1", "PSKV_COORDINATOR": "pskv-0.pskv:5100", "PSKV_HOST": "10.2.0.5"}
    found = detect({**K8S, "PSKV_PORT": "6000"}, FakeNetwork())
    assert found.values["PSKV_COORDINATOR"] == "pskv-0.pskv:6000"


def test_kubernetes_pod_zero_binds_its_own_address():
    """Pod 0 runs the coordinator on its own address: ZeroMQ cannot bind a name."""
    found = detect({**K8S, "JOB_COMPLETION_INDEX": "0"}, FakeNetwork())
    assert found.values == {"PSKV_RANK": "0", "PSKV_COORDINATOR": "10.2.0.5:5100", "PSKV_HOST": "10.2.0.5"}
    cfg = NodeConfig.from_env({"JOB_COMPLETION_INDEX": "0", "PSKV_NUM_NODES": "2", "PSKV_HOST": "127.0.0.1"})
    assert (cfg.rank, cfg.num_nodes, cfg.coordinator, cfg.host) == (0, 2, "127.0.0.1:5100", "127.0.0.1")


@pytest.mark.parametrize("change, match", [
    ({"PSKV_NUM_NODES": ""}, r"^JOB_COMPLETION_INDEX=1 \(a Kubernetes Indexed Job\) but PSKV_NUM_NODES is not set"),
    ({"JOB_COMPLETION_INDEX": "3"}, r"^JOB_COMPLETION_INDEX=3 but PSKV_NUM_NODES=3: indexes run from 0 to 2"),
    ({"JOB_COMPLETION_INDEX": "x"}, r"^JOB_COMPLETION_INDEX='x' \(Kubernetes\) is not a number >= 0$"),
    ({"PSKV_COORDINATOR_HOST": ""}, r"^JOB_COMPLETION_INDEX=1 \(a Kubernetes Indexed Job\) but "
                                    r"PSKV_COORDINATOR_HOST is not set; set it to JOB-0.SERVICE"),
])
def test_kubernetes_inconsistent_values_are_config_errors(change, match):
    with pytest.raises(ConfigError, match=match):
        detect({**K8S, **change}, FakeNetwork())


# --- no launcher, and the real network -------------------------------------------------------------

def test_no_launcher_variables_detect_nothing():
    """Without any launcher's variables nothing is mapped (the defaults: a private 1-node cluster)."""
    assert detect({"HOME": "/root", "SLURM_PROCID": "0"}, FakeNetwork()) is None
    assert NodeConfig.from_env({"SLURM_JOB_ID": "5", "MASTER_ADDR": "x"}) == NodeConfig()


def test_network_loopback_needs_no_resolver():
    """The real Network on loopback: an address is itself, and the route to 127.0.0.1 starts there."""
    net = Network()
    assert net.address_of("127.0.0.1") == "127.0.0.1"
    assert net.route_to("127.0.0.1") == "127.0.0.1"


# --- examples/k8s/pskv-job.yaml --------------------------------------------------------------------

def test_k8s_example_is_consistent_and_maps_to_one_cluster():
    """The example's size, names and env agree, and its pods map to rank = index, coordinator on pod 0."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "examples" / "k8s" / "pskv-job.yaml").read_text()
    service, job = re.findall(r"^  name: (\S+)$", text, re.M)
    env = dict(re.findall(r"- name: (PSKV_\w+) *(?:#.*)?\n *value: \"?([^\"\n]+)\"?", text))
    size = int(re.search(r"^  completions: (\d+)\b", text, re.M).group(1))
    assert (service, job, re.search(r"subdomain: (\S+)", text).group(1)) == ("pskv", "pskv", "pskv")
    assert int(re.search(r"^  parallelism: (\d+)\b", text, re.M).group(1)) == size == int(env["PSKV_NUM_NODES"])
    assert env["PSKV_COORDINATOR_HOST"] == f"{job}-0.{service}"
    assert "fieldPath: status.podIP" in text  # PSKV_HOST
    pods = [detect({**env, "JOB_COMPLETION_INDEX": str(i), "PSKV_HOST": f"10.3.0.{i}"}, FakeNetwork())
            for i in range(size)]
    assert [p.values["PSKV_COORDINATOR"] for p in pods] == ["10.3.0.0:5100"] + ["pskv-0.pskv:5100"] * (size - 1)
    assert [p.values["PSKV_RANK"] for p in pods] == [str(i) for i in range(size)]
