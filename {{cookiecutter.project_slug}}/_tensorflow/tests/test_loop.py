"""What only the Keras loop does: its step count under accumulation, an XLA-compiled step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHORT, read_metrics, run_module, train

from {{ cookiecutter.package_name }} import checkpoint


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
    train(tmp_path, "debug=fast", "logger=jsonl", "trainer.compile=true")
    # The weights file has no trace of XLA: evaluate rebuilds a plain model and scores it.
    result = run_module("evaluate", f"ckpt_path={tmp_path}", f"hydra.run.dir={tmp_path}/eval")
    assert result.returncode == 0, result.stdout
    scored = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert scored["test/accuracy"] == pytest.approx(read_metrics(tmp_path)["test/accuracy"])
