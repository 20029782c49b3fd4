"""Which node of which cluster: each managed service's description of a three-node cluster, as
its documentation gives it, read by cluster/nodes.py the same way; and EFA between nodes
(cluster/fabric.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from {{ cookiecutter.package_name }}.cluster import fabric
from {{ cookiecutter.package_name }}.cluster.nodes import ClusterError, detect

NOWHERE = Path("/nonexistent/resourceconfig.json")


def sagemaker(tmp_path: Path, current: str) -> Path:
    config = tmp_path / "resourceconfig.json"
    # SageMaker lists hosts sorted; shuffled here, as nothing else promises the order.
    hosts = ["algo-2", "algo-1", "algo-3"]
    config.write_text(json.dumps({"current_host": current, "hosts": hosts}))
    return config


def test_sagemaker_resourceconfig(tmp_path: Path) -> None:
    cluster = detect({}, sagemaker(tmp_path, "algo-2"))
    assert (cluster.service, cluster.nodes, cluster.node_rank) == ("sagemaker", 3, 1)
    assert cluster.master_addr == "algo-1" and cluster.master_port == 29500
    assert cluster.hosts == ("algo-1", "algo-2", "algo-3")
    with pytest.raises(ClusterError, match="current_host 'algo-9'"):
        detect({}, sagemaker(tmp_path, "algo-9"))


def test_vertex_cluster_spec() -> None:
    spec = {
        "cluster": {"workerpool0": ["cmle-0:2222"], "workerpool1": ["cmle-1:2222", "cmle-2:2222"]},
        "task": {"type": "workerpool1", "index": 1},
    }
    cluster = detect({"CLUSTER_SPEC": json.dumps(spec)}, NOWHERE)
    assert (cluster.service, cluster.nodes, cluster.node_rank) == ("vertex", 3, 2)
    assert (cluster.master_addr, cluster.master_port) == ("cmle-0", 2222)
    spec["task"] = {"type": "workerpool0", "index": 0}
    assert detect({"CLUSTER_SPEC": json.dumps(spec)}, NOWHERE).node_rank == 0


def test_azureml_environment() -> None:
    env = {"MASTER_ADDR": "10.0.0.4", "MASTER_PORT": "6105", "NODE_RANK": "2", "WORLD_SIZE": "3"}
    cluster = detect(env, NOWHERE)
    assert (cluster.service, cluster.nodes, cluster.node_rank) == ("azureml", 3, 2)
    assert (cluster.master_addr, cluster.master_port) == ("10.0.0.4", 6105)


def test_skypilot_environment() -> None:
    env = {
        "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NODE_IPS": "10.1.0.7\n10.1.0.8\n10.1.0.9\n",
        "SKYPILOT_NUM_NODES": "3", "SKYPILOT_NUM_GPUS_PER_NODE": "4",
    }  # fmt: skip
    cluster = detect(env, NOWHERE)
    assert (cluster.service, cluster.nodes, cluster.node_rank) == ("skypilot", 3, 0)
    assert cluster.master_addr == "10.1.0.7" and cluster.gpus_per_node == 4
    with pytest.raises(ClusterError, match="SKYPILOT_NUM_NODES=2"):
        detect(env | {"SKYPILOT_NUM_NODES": "2"}, NOWHERE)


def test_nothing_said_is_one_node_and_a_rank_out_of_range_is_refused() -> None:
    single = detect({}, NOWHERE)
    assert (single.service, single.nodes, single.node_rank) == ("single", 1, 0)
    with pytest.raises(ClusterError, match="node rank 3 of 3 nodes"):
        detect({"MASTER_ADDR": "h", "NODE_RANK": "3", "WORLD_SIZE": "3"}, NOWHERE)


def rdma_devices(root: Path, drivers: dict[str, str]) -> Path:
    """A /sys/class/infiniband of devices, each one's device/driver a link to its driver."""
    for name, driver in drivers.items():
        (root / "drivers" / driver).mkdir(parents=True, exist_ok=True)
        (root / "class" / name / "device").mkdir(parents=True)
        (root / "class" / name / "device" / "driver").symlink_to(root / "drivers" / driver)
    return root / "class"


def test_efa_between_nodes_only_where_the_device_and_nccl_s_plugin_are(tmp_path: Path) -> None:
    efa = rdma_devices(tmp_path / "efa", {"rdmap16s27": "efa", "rdmap32s27": "efa"})
    mellanox = rdma_devices(tmp_path / "ib", {"mlx5_0": "mlx5_core"})
    plugin = tmp_path / "ofi" / "libnccl-net-ofi.so"
    plugin.parent.mkdir()
    plugin.touch()
    with_plugin = {"LD_LIBRARY_PATH": f"/nowhere:{plugin.parent}"}
    assert fabric.efa_devices(efa) == ["rdmap16s27", "rdmap32s27"]
    assert fabric.efa_devices(mellanox) == [] and fabric.efa_devices(tmp_path / "none") == []
    # One node, or no EFA: nothing set, nothing said.
    assert fabric.efa_settings(1, with_plugin, efa) == ({}, None)
    assert fabric.efa_settings(4, with_plugin, mellanox) == ({}, None)
    # EFA without the plugin: NCCL would use TCP; one line says so, nothing is set.
    chosen, line = fabric.efa_settings(4, {}, efa)
    assert chosen == {} and "2 EFA devices here but no aws-ofi-nccl plugin" in line
    # With it: SageMaker's toolkit's variables, except those already set.
    chosen, line = fabric.efa_settings(4, {**with_plugin, "FI_PROVIDER": "efa-direct"}, efa)
    assert chosen == {"FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1"}
    assert str(plugin) in line and "FI_PROVIDER" not in line
