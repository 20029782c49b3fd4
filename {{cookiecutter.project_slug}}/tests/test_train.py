"""End-to-end training runs on the CPU, through `python -m PACKAGE.train` as a user runs it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import (
    PROJECT_ROOT,
    SHORT,
    module_command,
    project_env,
    read_metrics,
    run_module,
    train,
)

from {{ cookiecutter.package_name }}.training import checkpoint


def test_one_batch_smoke_run(tmp_path: Path) -> None:
    result = train(tmp_path, "debug=fast", "logger=jsonl")
    metrics = read_metrics(tmp_path)
    assert {"test/accuracy", "test/loss", "val/accuracy", "val/loss"} <= metrics.keys()
    assert metrics["epochs"] == 1
    assert (tmp_path / "checkpoints" / checkpoint.LAST).is_file()
    assert (tmp_path / "checkpoints" / checkpoint.BEST).is_file()
    assert (tmp_path / "debug.log").is_file()
    assert "run finished" in result.stdout


def test_run_directory_holds_resolved_config(short_run: Path) -> None:
    config = yaml.safe_load((short_run / "config.yaml").read_text())
    assert config["trainer"]["max_epochs"] == 3
    assert config["paths"]["output_dir"] == str(short_run)  # interpolations resolved
    lines = (short_run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines if '"epoch"' in line] == [1, 2, 3]


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The defaults, unchanged (what a new user's first `invoke train` does), trained under the
    umask of a shared volume's group (002)."""
    run_dir = tmp_path_factory.mktemp("default") / "run"
    done = subprocess.run(
        module_command("train", "logger=jsonl", f"hydra.run.dir={run_dir}"),
        cwd=PROJECT_ROOT, env=project_env(), capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: os.umask(0o002),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return run_dir


@pytest.mark.slow
def test_default_model_reaches_95_percent(default_run: Path) -> None:
    metrics = read_metrics(default_run)
    assert metrics["test/accuracy"] >= 0.95, metrics


def test_evaluate_reproduces_the_test_metrics(short_run: Path) -> None:
    result = run_module("evaluate", f"ckpt_path={short_run}", f"hydra.run.dir={short_run}/eval")
    assert result.returncode == 0, result.stdout
    scored = json.loads((short_run / "eval" / "metrics.json").read_text())
    trained = read_metrics(short_run)
    assert scored["test/accuracy"] == pytest.approx(trained["test/accuracy"])
    assert scored["test/loss"] == pytest.approx(trained["test/loss"], rel=1e-5)


def test_crossval_scores_every_fold(tmp_path: Path) -> None:
    result = run_module(
        "crossval", "debug=fast", "logger=jsonl", "data.folds=3", f"hydra.run.dir={tmp_path}"
    )
    assert result.returncode == 0, result.stdout
    summary = json.loads((tmp_path / "crossval.json").read_text())
    assert summary["folds"] == 3 and len(summary["per_fold"]) == 3
    assert 0.0 < summary["cv/accuracy_mean"] <= 1.0
    assert sorted(p.name for p in tmp_path.glob("fold_*")) == ["fold_0", "fold_1", "fold_2"]


@pytest.mark.slow
def test_checkpoint_mirror_lets_a_fresh_machine_resume(tmp_path: Path) -> None:
    mirror = tmp_path / "bucket"
    run_dir = tmp_path / "run"
    train(run_dir, *SHORT, f"callbacks.checkpoint.mirror_uri=file://{mirror}")
    assert (mirror / checkpoint.LAST).is_file() and (mirror / checkpoint.BEST).is_file()
    # A new VM: same run directory name, no local checkpoints, the mirror still there.
    fresh = tmp_path / "fresh"
    result = train(
        fresh, *SHORT, "trainer.max_epochs=4", f"callbacks.checkpoint.mirror_uri=file://{mirror}"
    )
    assert "fetched" in result.stdout and "resumed" in result.stdout
    assert read_metrics(fresh)["epochs"] == 4


def test_the_summary_is_the_last_thing_printed_and_agrees_with_metrics_json(
    short_run: Path, short_run_stdout: str
) -> None:
    lines = short_run_stdout.rstrip().splitlines()
    start = max(i for i, line in enumerate(lines) if line.endswith("- run finished"))
    summary = dict(line.split(maxsplit=1) for line in lines[start + 1 :])
    metrics = read_metrics(short_run)
    for key in ("test/accuracy", "test/loss", "val/accuracy", "val/loss"):
        assert summary[key] == f"{metrics[key]:.4f}", key
    assert summary["epochs"] == str(metrics["epochs"]) and summary["metrics"].endswith("json")
    # The training steps' own rate (what invoke estimate profiles) and the threads they ran on.
    steps, samples = metrics["train_steps_per_second"], metrics["train_samples_per_second"]
    assert 0 < steps < samples and summary["train_steps_per_second"] == f"{steps:.4f}"
    assert metrics["threads"] >= 1
    # No third-party start-up lines (the framework's C++ logging) anywhere in the run.
    assert not [line for line in lines if "absl" in line or "cpu_feature_guard" in line]


@pytest.mark.slow
def test_result_files_follow_the_umask(default_run: Path) -> None:
    """A teammate, or another user of a shared volume, can read what a run writes."""
    files = [default_run / "config.yaml", default_run / "metrics.json",
             default_run / "metrics.jsonl", *(default_run / "checkpoints").iterdir()]  # fmt: skip
    modes = {path.name: oct(stat.S_IMODE(path.stat().st_mode)) for path in files}
    assert len(modes) >= 5 and modes == dict.fromkeys(modes, "0o664")


@pytest.mark.slow
def test_crossval_without_an_optimized_metric(tmp_path: Path) -> None:
    result = run_module(
        "crossval", *SHORT, "data.folds=2", "optimized_metric=null", f"hydra.run.dir={tmp_path}"
    )
    assert result.returncode == 0, result.stdout
    assert json.loads((tmp_path / "crossval.json").read_text())["folds"] == 2
