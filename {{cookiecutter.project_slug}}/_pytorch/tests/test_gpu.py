"""What only means something on CUDA GPUs: mixed precision with the gradient scaler,
torch.compile, DDP over NCCL. Skipped, with the reason, where the GPUs are missing. Each test
asserts, from the run's own metrics.json, the device and precision it trained with."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (
    PACKAGE,
    PROJECT_ROOT,
    RESUMABLE,
    gpu_env,
    interrupt,
    read_metrics,
    run_module,
    train,
)

from {{ cookiecutter.package_name }}.training import checkpoint

CUDA = ["trainer.device=cuda", "logger=jsonl"]


def mixed_precision() -> str:
    """What trainer.precision=mixed must pick here: bf16 from compute capability 8.0."""
    import torch

    return "bf16" if torch.cuda.get_device_capability(0) >= (8, 0) else "fp16"


@pytest.mark.gpu
def test_the_gpu_trainer_config_trains_compiled_in_mixed_precision(tmp_path: Path) -> None:
    result = train(tmp_path, "trainer=gpu", "debug=fast", "logger=jsonl", env=gpu_env())
    assert "on cuda:0" in result.stdout
    metrics = read_metrics(tmp_path)
    assert metrics["epochs"] == 1
    assert (metrics["device"], metrics["precision"]) == ("cuda:0", mixed_precision())


@pytest.mark.parametrize("asked", ["trainer=gpu", "trainer.device=cuda"])
def test_a_gpu_asked_for_where_none_is_stops_in_one_line(tmp_path: Path, asked: str) -> None:
    """Never a quiet fall back to the CPU: no run folder, one line, exit 2 (the GPUs hidden)."""
    done = run_module("train", "debug=fast", asked, f"hydra.run.dir={tmp_path / 'run'}")
    assert done.returncode == 2, done.stdout
    assert done.stdout.strip().splitlines() == [
        f"error: {asked}: no CUDA GPU is visible here (none, or CUDA_VISIBLE_DEVICES hides "
        "them); run on the CPU with trainer=cpu"
    ]
    assert not (tmp_path / "run").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_half_precision_stops_and_resumes_to_the_same_metrics(
    tmp_path: Path, precision: str
) -> None:
    """fp16 goes through the gradient scaler, whose state the checkpoint carries."""
    run = [*CUDA, f"trainer.precision={precision}"]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(straight, *RESUMABLE, *run, env=gpu_env())
    code, _, output = interrupt(stopped, signal.SIGTERM, 50, *run, env=gpu_env())
    assert code == 128 + signal.SIGTERM, output
    state = checkpoint.load(stopped / "checkpoints" / checkpoint.LAST)
    assert bool(state["scaler"]) == (precision == "fp16")  # the scaler runs for fp16 only
    resumed = train(stopped, *RESUMABLE, *run, env=gpu_env())  # on the GPU, from the CPU load
    assert "resumed from" in resumed.stdout
    assert read_metrics(stopped)["test/loss"] == read_metrics(straight)["test/loss"]
    metrics = read_metrics(stopped)
    assert (metrics["device"], metrics["precision"]) == ("cuda:0", precision)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "fp32", "fp16"])
def test_training_steps_never_make_the_host_wait_for_the_gpu(
    tmp_path: Path, precision: str
) -> None:
    """Every step of 3 epochs under CUDA's sync check; the loss is read only for logging, every N
    steps, so N here is past the run's end. fp16's gradient scaler checks for infinities: with a
    fused optimizer (the default) the check runs inside the optimizer's kernel, with another it
    reads a flag on the host, one wait per step, which is counted and allowed."""
    checked = tmp_path / "checked.json"
    command = [
        sys.executable, str(PROJECT_ROOT / "tests" / "helpers" / "sync_check.py"), "debug=short",
        *CUDA, f"trainer.precision={precision}", "trainer.log_every_n_steps=1000",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, env=gpu_env(SYNC_CHECKED=str(checked)),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(checked.read_text())
    print(f"{precision}: {report}")  # the GPU check's report keeps it
    assert report["control"] >= 1, "the check sees a deliberate wait"
    assert report["steps"] == 15, "3 epochs of 5 batches, each one checked"
    assert report["syncs"] == 0, report["where"]
    metrics = read_metrics(tmp_path / "run")
    named = "tf32" if precision == "fp32" else precision  # TF32 is on by default on CUDA
    assert (metrics["epochs"], metrics["device"], metrics["precision"]) == (3, "cuda:0", named)


@pytest.mark.gpu(2)
def test_two_gpus_train_with_ddp_over_nccl(tmp_path: Path) -> None:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", f"{PACKAGE}.train", "debug=short", *CUDA, f"hydra.run.dir={tmp_path}",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, env=gpu_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "DDP: rank 0 of 2 on cuda:0 (nccl)" in (tmp_path / "debug.log").read_text()
    assert read_metrics(tmp_path)["epochs"] == 3 and read_metrics(tmp_path)["device"] == "cuda:0"
