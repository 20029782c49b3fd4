"""`python -m {{ cookiecutter.package_name }}.launch [overrides]`: train on every node of a managed job.

The image's entrypoint on SageMaker, Vertex AI, Azure ML and SkyPilot: it reads which node this
is (cluster/nodes.py) and starts torchrun with the node count, this node's rank, the first node's
address and one process per GPU (one on a CPU machine), each running train.py with the
overrides. On one node it is `torchrun --standalone`, as `invoke train --gpus N` runs here.
"""

from __future__ import annotations

import os
import sys

from .cluster import fabric
from .cluster.nodes import Cluster, ClusterError, detect
from .config.command import prepare_node

PACKAGE = __package__ or "{{ cookiecutter.package_name }}"


def command(cluster: Cluster, procs_per_node: int, overrides: list[str]) -> list[str]:
    """The torchrun command line for this node."""
    run = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={procs_per_node}"]
    if cluster.nodes == 1:
        run.append("--standalone")
    else:
        run += [
            f"--nnodes={cluster.nodes}", f"--node-rank={cluster.node_rank}",
            f"--master-addr={cluster.master_addr}", f"--master-port={cluster.master_port}",
        ]  # fmt: skip
    return [*run, "-m", f"{PACKAGE}.train", *overrides]


def processes_per_node(cluster: Cluster) -> int:
    """One process per GPU here (or as the service says), one on a CPU machine."""
    import torch

    return cluster.gpus_per_node or max(1, torch.cuda.device_count())


def main() -> None:
    prepare_node(sys.argv[1:])
    try:
        cluster = detect()
    except (ClusterError, KeyError, ValueError) as error:
        sys.exit(f"error: cannot tell this node's place in the cluster: {error}")
    argv = command(cluster, processes_per_node(cluster), sys.argv[1:])
    print(
        f"launch: {cluster.service}, node {cluster.node_rank + 1} of {cluster.nodes}, "
        f"first node {cluster.master_addr}:{cluster.master_port}",
        flush=True,
    )
    fabric.apply(cluster.nodes)  # EFA between nodes where the machine and the image have it
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
