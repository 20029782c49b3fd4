"""Hyperparameter sweeps: a Hydra grid and an Optuna search, run locally."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import SHORT, run_module


def assert_names_the_best(output: str, sweep_dir: Path, jobs: int) -> None:
    """The sweep's last lines: the best job by val/accuracy, its value and its overrides."""
    scores = {run: json.loads((run / "metrics.json").read_text())["val/accuracy"]
              for run in sweep_dir.iterdir() if (run / "metrics.json").is_file()}  # fmt: skip
    best = max(scores, key=scores.__getitem__)
    tail = output.rstrip().splitlines()[-4:]
    assert tail[0].endswith(f"sweep finished: best of {jobs} runs by val/accuracy (max)"), tail
    assert tail[1].split() == ["val/accuracy", f"{scores[best]:.4f}"]
    assert tail[2].split() == ["run", str(best)]
    overrides = yaml.safe_load((best / ".hydra" / "overrides.yaml").read_text())
    assert tail[3].split(maxsplit=1) == ["overrides", " ".join(overrides)]


@pytest.mark.slow
def test_grid_sweep_runs_every_combination(tmp_path: Path) -> None:
    result = run_module(
        "train", "-m", *SHORT, "optimizer.lr=0.001,0.01", f"hydra.sweep.dir={tmp_path}"
    )
    assert result.returncode == 0, result.stdout
    configs = [yaml.safe_load((tmp_path / str(i) / "config.yaml").read_text()) for i in (0, 1)]
    assert [c["optimizer"]["lr"] for c in configs] == [0.001, 0.01]
    assert all((tmp_path / str(i) / "metrics.json").is_file() for i in (0, 1))
    assert_names_the_best(result.stdout, tmp_path, 2)


@pytest.mark.slow
def test_optuna_search_optimizes_validation_accuracy(tmp_path: Path) -> None:
    result = run_module(
        "train",
        *SHORT,
        "hparams_search=digits_optuna",
        "hydra.sweeper.n_trials=2",
        f"hydra.sweep.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stdout
    best = yaml.safe_load((tmp_path / "optimization_results.yaml").read_text())
    assert 0.0 < best["best_value"] <= 1.0
    assert {"optimizer.lr", "model.dropout"} <= set(best["best_params"])
    assert len(list(tmp_path.glob("*/metrics.json"))) == 2
    assert_names_the_best(result.stdout, tmp_path, 2)
    for noise in ("Study name", "setup plugin", "A new study created", "Best parameters"):
        assert noise not in result.stdout
