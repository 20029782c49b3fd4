"""What only means something on CUDA GPUs: mixed precision, XLA, MirroredStrategy over two GPUs.
Skipped, with the reason, where the GPUs are missing."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import project_env, read_metrics, train

from {{ cookiecutter.package_name }}.training import checkpoint


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["mixed", "fp16", "bf16"])
def test_mixed_precision_trains_on_the_gpu(tmp_path: Path, precision: str) -> None:
    train(tmp_path, "trainer=gpu", f"trainer.precision={precision}", "debug=fast", "logger=jsonl")
    assert read_metrics(tmp_path)["epochs"] == 1
    assert (tmp_path / "checkpoints" / checkpoint.BEST).is_file()


@pytest.mark.gpu(2)
def test_mirrored_strategy_over_two_gpus(tmp_path: Path) -> None:
    result = train(
        tmp_path, "debug=short", "trainer.device=cuda", "logger=jsonl",
        env=project_env(NUM_REPLICAS="2"),
    )  # fmt: skip
    assert "MirroredStrategy over 2 devices" in result.stdout and "GPU:1" in result.stdout
    assert read_metrics(tmp_path)["epochs"] == 3
