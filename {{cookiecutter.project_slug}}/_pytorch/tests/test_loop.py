"""What only the PyTorch loop does: its step count under accumulation, a compiled model."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SHORT, train

from {{ cookiecutter.package_name }}.training import checkpoint


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
    # 5 batches per epoch in pairs: steps at batches 2, 4 and the epoch's last (5).
    assert state["progress"]["global_step"] == 3 * 3


@pytest.mark.slow
def test_compiled_model_trains_and_saves_plain_weights(tmp_path: Path) -> None:
    train(tmp_path, "debug=fast", "logger=jsonl", "trainer.compile=true")
    state = checkpoint.load(tmp_path / "checkpoints" / checkpoint.BEST)
    # Checkpoints hold the plain module's weights, loadable without torch.compile.
    assert state["model"] and not any(key.startswith("_orig_mod") for key in state["model"])
