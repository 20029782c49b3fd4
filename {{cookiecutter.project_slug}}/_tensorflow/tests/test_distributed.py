"""tf.distribute: MirroredStrategy over two logical CPU devices in one process, and
MultiWorkerMirroredStrategy over two local worker processes joined by TF_CONFIG."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, SHORT, module_command, project_env, read_metrics, train

from {{ cookiecutter.package_name }}.training import checkpoint

RUN_FILES = [".hydra", "checkpoints", "config.yaml", "debug.log", "metrics.json", "metrics.jsonl"]


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def start_workers(*overrides: str) -> list[subprocess.Popen]:
    """Two worker processes of one job, as two machines would run it."""
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    return [
        subprocess.Popen(
            module_command("train", *SHORT, *overrides),
            cwd=PROJECT_ROOT,
            env=project_env(
                TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]


@pytest.mark.slow
def test_mirrored_strategy_over_two_logical_cpus(tmp_path: Path) -> None:
    # A constant learning rate is a mirrored variable here (the workers below use a schedule).
    result = train(tmp_path, *SHORT, "scheduler=constant", env=project_env(NUM_REPLICAS="2"))
    assert "MirroredStrategy over 2 devices" in result.stdout
    assert read_metrics(tmp_path)["epochs"] == 3
    state = checkpoint.load(tmp_path / "checkpoints" / checkpoint.LAST)
    # Every step splits one batch over the two replicas: 5 capped batches per epoch, 3 epochs.
    assert state["progress"]["global_step"] == 15
    assert sorted(p.name for p in tmp_path.iterdir()) == RUN_FILES


@pytest.mark.slow
def test_two_local_workers_train_and_only_the_first_writes(tmp_path: Path) -> None:
    workers = start_workers(f"paths.root_dir={tmp_path}")
    outputs = [worker.communicate(timeout=600)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs[0] + outputs[1]
    assert "MultiWorkerMirroredStrategy: worker 0 of 2" in outputs[0]
    (run_dir,) = (tmp_path / "outputs" / "debug").iterdir()  # one folder, chosen by worker 0
    assert sorted(p.name for p in run_dir.iterdir()) == RUN_FILES
    assert read_metrics(run_dir)["epochs"] == 3
