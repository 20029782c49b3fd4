"""launch.py, the entrypoint of managed jobs: TF_CONFIG for each node, a service's own TF_CONFIG
kept, and a one-node launch that trains as train.py does."""

from __future__ import annotations

import pytest
from conftest import SHORT, read_metrics, run_module

from {{ cookiecutter.package_name }}.cluster.nodes import Cluster, ClusterError
from {{ cookiecutter.package_name }}.launch import tf_config


def test_every_node_is_a_worker_and_the_first_the_chief() -> None:
    hosts = ("algo-1", "algo-2", "algo-3")
    config = tf_config(Cluster("sagemaker", 3, 1, "algo-1", 29500, hosts))
    assert config == {
        "cluster": {"worker": ["algo-1:2222", "algo-2:2222", "algo-3:2222"]},
        "task": {"type": "worker", "index": 1},
    }
    assert tf_config(Cluster("single", 1, 0, "127.0.0.1", 29500, ("127.0.0.1",))) is None
    with pytest.raises(ClusterError, match="names the first node only"):
        tf_config(Cluster("azureml", 2, 1, "10.0.0.4", 6105))


@pytest.mark.slow
def test_a_one_node_launch_trains(tmp_path) -> None:
    done = run_module("launch", *SHORT, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stdout
    assert read_metrics(tmp_path / "run")["epochs"] >= 1
    assert "launch: worker" not in done.stdout  # one node: no TF_CONFIG written
