"""Preemption and resume: SIGTERM/SIGINT save a checkpoint and exit; a re-run continues exactly,
on in-memory arrays and on streamed shards alike."""

from __future__ import annotations

import signal
from pathlib import Path

import numpy as np
import pytest
from conftest import (
    RESUMABLE,
    SHORT,
    interrupt,
    read_metrics,
    run_module,
    start_training,
    train,
    wait_for_steps,
)

from {{ cookiecutter.package_name }}.data.shards.writer import prepare
from {{ cookiecutter.package_name }}.data.sources import load_arrays
from {{ cookiecutter.package_name }}.training import checkpoint

RUN = RESUMABLE


@pytest.fixture(scope="module")
def streamed(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The digits as shards of ~20 kB (16 for train), read by two loader workers."""
    folder = tmp_path_factory.mktemp("shards")
    x, y = load_arrays("builtin:digits")
    np.savez(folder / "digits.npz", x=x, y=y)
    split = {"val_fraction": 0.15, "test_fraction": 0.15, "split_seed": 1234}
    prepare(str(folder / "digits.npz"), str(folder / "digits"), shard_mb=0.02, **split)
    return ["data=shards", f"data.source={folder / 'digits'}", "data.num_workers=2"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory, streamed: list[str]) -> dict[str, Path]:
    """One uninterrupted run of RUN on each data ("in-memory", "streamed"), made once: every
    interrupted run of its data must end with its metrics, however often it checkpoints."""
    runs = {}
    for data, source in (("in-memory", []), ("streamed", streamed)):
        runs[data] = tmp_path_factory.mktemp(f"straight-{data}")
        train(runs[data], *RUN, *source)
    return runs


@pytest.mark.parametrize(
    "sig",
    [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)],
    ids=["TERM", "INT"],
)
def test_signal_saves_checkpoint_and_exits_non_zero(tmp_path: Path, sig: signal.Signals) -> None:
    code, seconds, output = interrupt(tmp_path, sig, after_steps=30)
    assert code == 128 + sig, output
    # Promptly, well inside the clouds' shortest notice (30 s on GCP and Azure), even on a busy
    # machine: the signal is handled between steps, not at the end of the epoch or the run.
    assert seconds < 20, f"took {seconds:.1f}s to stop"
    state = checkpoint.load(tmp_path / "checkpoints" / checkpoint.LAST)
    assert state["progress"]["global_step"] >= 30
    assert not (tmp_path / "metrics.json").exists()  # the run is not finished
    assert "checkpoint saved" in output


@pytest.mark.slow
@pytest.mark.parametrize("data", ["in-memory", "streamed"])
def test_resumed_run_ends_with_the_same_metrics(
    tmp_path: Path, data: str, streamed: list[str], straight: dict[str, Path]
) -> None:
    source = streamed if data == "streamed" else []
    interrupted = tmp_path / "interrupted"
    code, _, output = interrupt(interrupted, signal.SIGTERM, 50, *source)
    assert code == 128 + signal.SIGTERM, output
    state = checkpoint.load(interrupted / "checkpoints" / checkpoint.LAST)
    assert 0 < state["progress"]["epoch"] < 6 or state["progress"]["batches_done"] > 0
    resumed = train(interrupted, *RUN, *source)
    assert "resumed from" in resumed.stdout
    expected, actual = read_metrics(straight[data]), read_metrics(interrupted)
    for key in ("test/accuracy", "test/loss", "val/accuracy", "val/loss", "best_epoch", "epochs"):
        assert actual[key] == expected[key], key


@pytest.mark.slow
def test_hard_kill_mid_epoch_on_streamed_data_resumes_exactly(
    tmp_path: Path, streamed: list[str], straight: dict[str, Path]
) -> None:
    """SIGKILL after a mid-epoch checkpoint (every 7 steps; 20 per epoch): the resume skips
    exactly the batches that checkpoint had trained on, and goes on with the next sample."""
    killed = tmp_path / "killed"
    often = [*streamed, "callbacks.checkpoint.every_n_steps=7"]
    process = start_training(killed, *often)
    wait_for_steps(killed, 50, process)  # step 48 or so: checkpoints at 42 (epoch 3, batch 2)
    process.kill()
    process.communicate()
    state = checkpoint.load(killed / "checkpoints" / checkpoint.LAST)
    assert state["progress"]["batches_done"] > 0, state["progress"]
    train(killed, *RUN, *often)
    assert read_metrics(killed)["test/loss"] == read_metrics(straight["streamed"])["test/loss"]


@pytest.mark.slow
def test_hard_kill_resumes_from_the_last_epoch_checkpoint(
    tmp_path: Path, straight: dict[str, Path]
) -> None:
    """SIGKILL gives no chance to save: the run resumes from the last epoch-end checkpoint."""
    killed = tmp_path / "killed"
    every_epoch = "callbacks.checkpoint.min_interval_s=0"
    process = start_training(killed, every_epoch)
    wait_for_steps(killed, 70, process)  # 20 steps and an epoch line per epoch: epoch 3 begun
    process.kill()
    process.communicate()
    state = checkpoint.load(killed / "checkpoints" / checkpoint.LAST)
    assert state["progress"]["batches_done"] == 0 and state["progress"]["epoch"] >= 2
    train(killed, *RUN, every_epoch)
    assert read_metrics(killed)["test/loss"] == read_metrics(straight["in-memory"])["test/loss"]


@pytest.mark.slow
def test_explicit_checkpoint_path_resumes_into_a_new_directory(
    tmp_path: Path, short_run: Path
) -> None:
    second = tmp_path / "second"
    result = train(second, *SHORT, "trainer.max_epochs=5", f"ckpt_path={short_run}")
    assert "resumed from" in result.stdout
    assert read_metrics(second)["epochs"] == 5


@pytest.mark.slow
def test_missing_checkpoint_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = run_module("train", *SHORT, f"ckpt_path={missing}", f"hydra.run.dir={tmp_path}/r")
    assert result.returncode != 0
    assert f"no checkpoint at '{missing}" in result.stdout
