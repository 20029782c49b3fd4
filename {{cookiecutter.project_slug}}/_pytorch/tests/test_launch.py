"""launch.py, the entrypoint of managed jobs: torchrun's command line for each node, and two
"nodes" (two launchers on this machine, told by SkyPilot-style variables where they stand)
training together over gloo to the metrics of one process with the same global batch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cloudgpu.testing import services
from conftest import PROJECT_ROOT, SHORT, project_env, read_metrics, train

from {{ cookiecutter.package_name }}.cluster.nodes import Cluster
from {{ cookiecutter.package_name }}.launch import command


def test_one_node_is_standalone_and_several_meet_at_the_first() -> None:
    one = command(Cluster("single", 1, 0, "127.0.0.1", 29500), 4, ["model=cnn"])
    assert one[1:6] == ["-m", "torch.distributed.run", "--nproc-per-node=4", "--standalone", "-m"]
    assert one[-2:] == ["{{ cookiecutter.package_name }}.train", "model=cnn"]
    node = command(Cluster("sagemaker", 3, 2, "algo-1", 29500), 8, [])
    assert node[3:8] == [
        "--nproc-per-node=8", "--nnodes=3", "--node-rank=2", "--master-addr=algo-1",
        "--master-port=29500",
    ]  # fmt: skip


@pytest.mark.slow
def test_two_nodes_train_to_the_metrics_of_one_process(tmp_path: Path) -> None:
    """Each node trains half of every batch of 32; one process trains whole batches of 32."""
    port = str(services.free_port())
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "{{ cookiecutter.package_name }}.launch", *SHORT,
             "data.batch_size=16", f"hydra.run.dir={tmp_path / 'two'}"],
            cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=project_env(
                SKYPILOT_NODE_RANK=str(rank), SKYPILOT_NODE_IPS="127.0.0.1\n127.0.0.1",
                SKYPILOT_NUM_NODES="2", SKYPILOT_NUM_GPUS_PER_NODE="1", MASTER_PORT=port,
            ),
        )
        for rank in (0, 1)
    ]  # fmt: skip
    outputs = [node.communicate(timeout=600)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert "launch: skypilot, node 1 of 2" in outputs[0]
    train(tmp_path / "one", *SHORT, "data.batch_size=32")
    two, one = read_metrics(tmp_path / "two"), read_metrics(tmp_path / "one")
    assert two["epochs"] == one["epochs"]
    # Not bit for bit: the two ranks' halves of a batch are not the one process's batch.
    assert abs(two["test/accuracy"] - one["test/accuracy"]) < 0.05, (two, one)
