"""What only means something on CUDA GPUs: mixed precision, XLA, MirroredStrategy over two GPUs.
Skipped, with the reason, where the GPUs are missing. Each test asserts, from the run's own
metrics.json, the device and precision it trained with."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from conftest import RESUMABLE, gpu_env, interrupt, read_metrics, run_module, train

from {{ cookiecutter.package_name }}.training import checkpoint


def mixed_precision() -> str:
    """What trainer.precision=mixed must pick here: bf16 from compute capability 8.0."""
    import tensorflow as tf

    gpu = tf.config.list_physical_devices("GPU")[0]
    capability = tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))
    return "bf16" if capability >= (8, 0) else "fp16"


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["mixed", "fp16", "bf16"])
def test_mixed_precision_trains_on_the_gpu(tmp_path: Path, precision: str) -> None:
    train(tmp_path, "trainer=gpu", f"trainer.precision={precision}", "debug=fast", "logger=jsonl",
          env=gpu_env())  # fmt: skip
    metrics = read_metrics(tmp_path)
    assert metrics["epochs"] == 1
    assert (tmp_path / "checkpoints" / checkpoint.BEST).is_file()
    wanted = mixed_precision() if precision == "mixed" else precision
    assert (metrics["device"], metrics["precision"]) == ("gpu", wanted)


@pytest.mark.gpu
def test_sigterm_on_the_gpu_checkpoints_and_the_resumed_run_ends_as_an_uninterrupted_one(
    tmp_path: Path,
) -> None:
    """What a preempted spot GPU does: SIGTERM mid-run, exit 143 with a checkpoint, then a
    restart on the GPU that ends with the metrics of a run never stopped."""
    run = [*RESUMABLE, "trainer.device=cuda"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(straight, *run, env=gpu_env())
    code, _, output = interrupt(stopped, signal.SIGTERM, 50, *run, env=gpu_env())
    assert code == 128 + signal.SIGTERM, output
    resumed = train(stopped, *run, env=gpu_env())
    assert "resumed from" in resumed.stdout
    metrics = read_metrics(stopped)
    assert metrics["test/loss"] == read_metrics(straight)["test/loss"]
    assert (metrics["device"], metrics["epochs"]) == ("gpu", 6)


def test_a_gpu_asked_for_where_none_is_stops_in_one_line(tmp_path: Path) -> None:
    """Never a quiet fall back to the CPU: no run folder, one line, exit 2 (the GPUs hidden)."""
    done = run_module("train", "debug=fast", "trainer=gpu", f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stdout
    assert done.stdout.strip().splitlines() == [
        "error: trainer=gpu: no CUDA GPU is visible here (none, or CUDA_VISIBLE_DEVICES hides "
        "them); run on the CPU with trainer=cpu"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.gpu(2)
def test_mirrored_strategy_over_two_gpus(tmp_path: Path) -> None:
    result = train(
        tmp_path, "debug=short", "trainer.device=cuda", "logger=jsonl",
        env=gpu_env(NUM_REPLICAS="2"),
    )  # fmt: skip
    assert "MirroredStrategy over 2 devices" in result.stdout and "GPU:1" in result.stdout
    metrics = read_metrics(tmp_path)
    assert (metrics["epochs"], metrics["device"], metrics["precision"]) == (3, "gpu x 2", "tf32")
