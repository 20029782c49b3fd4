"""What only the Keras loop does: its step count under accumulation, an XLA-compiled step (with
no compiler of the machine's), steps whose values stay on the device."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, SHORT, project_env, read_metrics, run_module, train

from {{ cookiecutter.package_name }}.training import checkpoint, toolchain


def test_grad_accumulation_clipping_and_precision(tmp_path: Path) -> None:
    train(
        tmp_path,
        *SHORT,
        "trainer.accumulate_grad_batches=2",
        "trainer.gradient_clip_norm=0.5",
        "trainer.precision=bf16",
        "trainer.deterministic=false",
        "scheduler=constant",
        "optimizer=sgd",
    )
    state = checkpoint.load(tmp_path / "checkpoints" / checkpoint.LAST)
    # Keras accumulates across epoch ends: 3 epochs of 5 batches, in pairs, make 7 steps.
    assert state["progress"]["global_step"] == 3 * 5 // 2


@pytest.mark.slow
def test_xla_compiled_run_trains_and_evaluates_uncompiled(tmp_path: Path) -> None:
    # XLA's CPU backend is the LLVM inside TensorFlow: a PATH with no compiler on it is enough.
    no_compiler = project_env(PATH=str(tmp_path / "bin"))
    train(tmp_path, "debug=fast", "logger=jsonl", "trainer.compile=true", env=no_compiler)
    # The weights file has no trace of XLA: evaluate rebuilds a plain model and scores it.
    result = run_module("evaluate", f"ckpt_path={tmp_path}", f"hydra.run.dir={tmp_path}/eval")
    assert result.returncode == 0, result.stdout
    scored = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert scored["test/accuracy"] == pytest.approx(read_metrics(tmp_path)["test/accuracy"])


def test_xla_on_a_gpu_without_ptxas_is_refused_in_one_line_naming_the_wheel() -> None:
    assert toolchain.compile_problem(on_gpu=False) is None
    if toolchain.nvcc_folder() is not None:
        pytest.skip("the nvidia-cuda-nvcc wheel is installed here (the GPU lock)")
    problem = toolchain.compile_problem(on_gpu=True)
    assert problem is not None and "nvidia-cuda-nvcc-cu12" in problem and "\n" not in problem


@pytest.mark.slow
def test_steps_leave_their_loss_and_metrics_on_the_device(tmp_path: Path) -> None:
    """Keras copies every step's logs to the host unless its callbacks take them as tensors; the
    copies left are one per epoch's end (and training's), with the bar on and logging past the
    run's end."""
    reads = tmp_path / "reads"
    command = [
        sys.executable, str(PROJECT_ROOT / "tests" / "helpers" / "host_reads.py"), *SHORT,
        "trainer.log_every_n_steps=1000", "trainer.progress_bar=true",
        f"hydra.run.dir={tmp_path / 'run'}",
    ]  # fmt: skip
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, env=project_env(HOST_READS=str(reads)),
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    state = checkpoint.load(tmp_path / "run" / "checkpoints" / checkpoint.LAST)
    assert state["progress"]["global_step"] == 15
    epochs = read_metrics(tmp_path / "run")["epochs"]
    assert int(reads.read_text()) <= epochs + 1, "no copy per step"
