"""Which node of which cluster this is, from what the service that started it says.

Managed training services start the same image on every node and describe the cluster each in its
own way; launch.py reads the answer here and starts training across the nodes:

    SageMaker   /opt/ml/input/config/resourceconfig.json: hosts (sorted), current_host
    Vertex AI   CLUSTER_SPEC: workerpool0 (the first node) and workerpool1 (the others), task
    Azure ML    MASTER_ADDR, MASTER_PORT, NODE_RANK, WORLD_SIZE (nodes, one process each)
    SkyPilot    SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS (the head first), SKYPILOT_NUM_NODES

Nothing found: one node. Sources: each service's documentation of its training environment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SAGEMAKER_CONFIG = Path("/opt/ml/input/config/resourceconfig.json")
DEFAULT_PORT = 29500  # the first node's rendezvous port, where the service names none


class ClusterError(Exception):
    """The service's description of the cluster is not what it should be."""


@dataclass(frozen=True)
class Cluster:
    service: str  # sagemaker, vertex, azureml, skypilot, or single
    nodes: int
    node_rank: int  # 0: the first node, whose address the others meet at
    master_addr: str
    master_port: int
    hosts: tuple[str, ...] = ()  # every node's address, first node first, where the service says
    gpus_per_node: int | None = None  # where the service says

    def __post_init__(self) -> None:
        if not 0 <= self.node_rank < self.nodes:
            raise ClusterError(f"{self.service}: node rank {self.node_rank} of {self.nodes} nodes")


def detect(environ: Mapping[str, str] | None = None, sagemaker: Path = SAGEMAKER_CONFIG) -> Cluster:
    """The cluster this process runs in, read from the first service whose description is here."""
    env = os.environ if environ is None else environ
    if sagemaker.is_file():
        return _sagemaker(json.loads(sagemaker.read_text()), env)
    if "CLUSTER_SPEC" in env:
        return _vertex(env)
    if "SKYPILOT_NODE_RANK" in env:
        return _skypilot(env)
    if "NODE_RANK" in env and "MASTER_ADDR" in env:
        return _azureml(env)
    return Cluster("single", 1, 0, "127.0.0.1", _port(env.get("MASTER_PORT")), ("127.0.0.1",))


def _sagemaker(config: dict, env: Mapping[str, str]) -> Cluster:
    hosts = tuple(sorted(config["hosts"]))  # sorted, so every node agrees on the first
    current = config["current_host"]
    if current not in hosts:
        raise ClusterError(f"resourceconfig.json: current_host {current!r} is not in {hosts}")
    port = _port(env.get("MASTER_PORT"))
    return Cluster("sagemaker", len(hosts), hosts.index(current), hosts[0], port, hosts)


def _vertex(env: Mapping[str, str]) -> Cluster:
    spec = json.loads(env["CLUSTER_SPEC"])
    pools = spec["cluster"]
    first = pools["workerpool0"]
    if len(first) != 1:
        raise ClusterError(f"CLUSTER_SPEC: workerpool0 holds {len(first)} nodes; it must hold 1")
    addresses = [*first, *pools.get("workerpool1", [])]
    hosts = tuple(address.rsplit(":", 1)[0] for address in addresses)
    task = spec["task"]
    rank = 0 if task["type"] == "workerpool0" else 1 + int(task["index"])
    # The port of workerpool0's address is the one Vertex opens between the replicas.
    return Cluster("vertex", len(hosts), rank, hosts[0], _port(first[0].rsplit(":", 1)[1]), hosts)


def _skypilot(env: Mapping[str, str]) -> Cluster:
    hosts = tuple(line.strip() for line in env["SKYPILOT_NODE_IPS"].splitlines() if line.strip())
    nodes = int(env.get("SKYPILOT_NUM_NODES", len(hosts)))
    if nodes != len(hosts):
        raise ClusterError(f"SKYPILOT_NUM_NODES={nodes} but SKYPILOT_NODE_IPS lists {len(hosts)}")
    gpus = env.get("SKYPILOT_NUM_GPUS_PER_NODE")
    return Cluster(
        "skypilot", nodes, int(env["SKYPILOT_NODE_RANK"]), hosts[0], _port(env.get("MASTER_PORT")),
        hosts, int(gpus) if gpus else None,
    )  # fmt: skip


def _azureml(env: Mapping[str, str]) -> Cluster:
    # Azure ML's job runs one process per node (process_count_per_instance: 1), so WORLD_SIZE
    # counts nodes. Only the first node's address is given: all a rendezvous needs (a job of
    # multi-worker TF_CONFIG gets one from Azure ML itself).
    nodes, rank = int(env.get("WORLD_SIZE", "1")), int(env["NODE_RANK"])
    return Cluster("azureml", nodes, rank, env["MASTER_ADDR"], _port(env.get("MASTER_PORT")))


def _port(value: str | None) -> int:
    return int(value) if value else DEFAULT_PORT
