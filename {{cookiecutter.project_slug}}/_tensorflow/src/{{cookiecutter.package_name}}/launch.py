"""`python -m {{ cookiecutter.package_name }}.launch [overrides]`: train on every node of a managed job.

The image's entrypoint on SageMaker, Vertex AI, Azure ML and SkyPilot: it reads which node this
is (cluster/nodes.py), writes TF_CONFIG for MultiWorkerMirroredStrategy (one worker per node, using
every GPU of its node) and runs train.py with the overrides. A TF_CONFIG the service set itself
(Azure ML, Vertex AI) is kept as it is; on one node nothing is set.
"""

from __future__ import annotations

import json
import os
import sys

from .cluster import fabric
from .cluster.nodes import Cluster, ClusterError, detect
from .config.command import prepare_node

PACKAGE = __package__ or "{{ cookiecutter.package_name }}"
WORKER_PORT = 2222  # each worker's gRPC port, where the service gives none


def tf_config(cluster: Cluster) -> dict | None:
    """TF_CONFIG for this node: every node a worker, the first the chief (index 0)."""
    if cluster.nodes == 1:
        return None
    if len(cluster.hosts) != cluster.nodes:
        raise ClusterError(f"{cluster.service} names the first node only; TF_CONFIG needs all")
    workers = [f"{host}:{WORKER_PORT}" for host in cluster.hosts]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": cluster.node_rank}}


def main() -> None:
    prepare_node(sys.argv[1:])
    if "TF_CONFIG" not in os.environ:
        try:
            config = tf_config(detect())
        except (ClusterError, KeyError, ValueError) as error:
            sys.exit(f"error: cannot tell this node's place in the cluster: {error}")
        if config is not None:
            os.environ["TF_CONFIG"] = json.dumps(config)
            print(f"launch: worker {config['task']['index']} of {config['cluster']['worker']}")
    # One worker per node: the first process of its machine (its live metrics report the GPUs).
    os.environ.setdefault("LOCAL_RANK", "0")
    workers = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {}).get("worker", [])
    fabric.apply(len(workers) or 1)  # EFA between nodes where the machine and the image have it
    argv = [sys.executable, "-m", f"{PACKAGE}.train", *sys.argv[1:]]
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
