"""End-to-end training runs on the CPU, through `python -m PACKAGE.train` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import SHORT, read_metrics, run_module, train

from {{ cookiecutter.package_name }} import checkpoint


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


@pytest.mark.slow
def test_default_model_reaches_95_percent(tmp_path: Path) -> None:
    """The defaults, unchanged: what a new user's first `invoke train` does."""
    train(tmp_path, "logger=jsonl")
    metrics = read_metrics(tmp_path)
    assert metrics["test/accuracy"] >= 0.95, metrics


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
{%- if cookiecutter.framework == "tensorflow" %}
    # Keras accumulates across epoch ends: 3 epochs of 5 batches, in pairs, make 7 steps.
    assert state["progress"]["global_step"] == 3 * 5 // 2
{%- else %}
    # 5 batches per epoch in pairs: steps at batches 2, 4 and the epoch's last (5).
    assert state["progress"]["global_step"] == 3 * 3
{%- endif %}


@pytest.mark.slow
{%- if cookiecutter.framework == "tensorflow" %}
def test_xla_compiled_run_trains_and_evaluates_uncompiled(tmp_path: Path) -> None:
    train(tmp_path, "debug=fast", "logger=jsonl", "trainer.compile=true")
    # The weights file has no trace of XLA: evaluate rebuilds a plain model and scores it.
    result = run_module("evaluate", f"ckpt_path={tmp_path}", f"hydra.run.dir={tmp_path}/eval")
    assert result.returncode == 0, result.stdout
    scored = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert scored["test/accuracy"] == pytest.approx(read_metrics(tmp_path)["test/accuracy"])
{%- else %}
def test_compiled_model_trains_and_saves_plain_weights(tmp_path: Path) -> None:
    train(tmp_path, "debug=fast", "logger=jsonl", "trainer.compile=true")
    state = checkpoint.load(tmp_path / "checkpoints" / checkpoint.BEST)
    # Checkpoints hold the plain module's weights, loadable without torch.compile.
    assert state["model"] and not any(key.startswith("_orig_mod") for key in state["model"])
{%- endif %}


def test_evaluate_reproduces_the_test_metrics(short_run: Path) -> None:
    result = run_module("evaluate", f"ckpt_path={short_run}", f"hydra.run.dir={short_run}/eval")
    assert result.returncode == 0, result.stdout
    scored = json.loads((short_run / "eval" / "metrics.json").read_text())
    trained = read_metrics(short_run)
    assert scored["test/accuracy"] == pytest.approx(trained["test/accuracy"])
    assert scored["test/loss"] == pytest.approx(trained["test/loss"], rel=1e-5)


def test_crossval_scores_every_fold(tmp_path: Path) -> None:
    result = run_module("crossval", *SHORT, "data.folds=3", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stdout
    summary = json.loads((tmp_path / "crossval.json").read_text())
    assert summary["folds"] == 3 and len(summary["per_fold"]) == 3
    assert 0.0 < summary["cv/accuracy_mean"] <= 1.0
    assert sorted(p.name for p in tmp_path.glob("fold_*")) == ["fold_0", "fold_1", "fold_2"]


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
