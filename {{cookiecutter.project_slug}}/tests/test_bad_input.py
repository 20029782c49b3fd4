"""Bad overrides and bad data fail fast, exit non-zero and say what was wrong."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import SHORT, run_module


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model=transformer", "Could not find 'model/transformer'"),
        ("trainer.max_epochs=ten", "Value 'ten' of type 'str' could not be converted to Integer"),
        ("trainer.precision=fp8", "Invalid value 'fp8', expected one of [fp32, bf16, fp16, mixed]"),
        ("trainer.device=tpu", "Invalid value 'tpu', expected one of [auto, cpu, cuda, mps]"),
        ("trainer.max_epoch=3", "Key 'max_epoch' not in 'TrainerConfig'"),
        ("seed=abc", "Value 'abc' of type 'str' could not be converted to Integer"),
    ],
)
def test_bad_override_is_refused_before_training(
    tmp_path: Path, override: str, message: str
) -> None:
    result = run_module("train", *SHORT, override, f"hydra.run.dir={tmp_path}/run")
    assert result.returncode != 0
    assert message in result.stdout
    assert not (tmp_path / "run").exists()  # nothing half made


def test_missing_data_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "absent.npz"
    result = run_module("train", *SHORT, "data=files", f"data.source={missing}")
    assert result.returncode != 0
    assert f"data source not found: '{missing}'" in result.stdout


def test_data_files_require_a_source() -> None:
    result = run_module("train", *SHORT, "data=files")
    assert result.returncode != 0
    assert "Missing mandatory value: data.source" in result.stdout


def test_own_npz_data_trains(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    np.savez(tmp_path / "mine.npz", x=x, y=y)
    result = run_module(
        "train", *SHORT, "data=files", f"data.source=file://{tmp_path}/mine.npz",
        f"hydra.run.dir={tmp_path}/run",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert "input (12,), 2 classes" in result.stdout
