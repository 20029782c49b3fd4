"""Checkpoint files survive crashes in the middle of a save and hold the run state."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest
from conftest import kill_mid_save

from {{ cookiecutter.package_name }}.training import checkpoint, storage
from {{ cookiecutter.package_name }}.training.checkpoint import BestCheckpoint


def small_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])


class FailsMidWrite:
    """A model whose save writes half a file, then fails (a full disk)."""

    def save_weights(self, path: Path) -> None:
        Path(path).write_bytes(b"half a file")
        raise OSError("disk full")


def test_save_keeps_weights_and_state_in_one_file(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.LAST
    model = small_model(0)
    checkpoint.save({"model": model, "progress": {"epoch": 2}}, path)
    assert checkpoint.load(path) == {"progress": {"epoch": 2}}
    other = small_model(1)
    other.load_weights(path)
    for saved, loaded in zip(model.get_weights(), other.get_weights(), strict=True):
        np.testing.assert_array_equal(saved, loaded)


def test_a_snapshot_is_saved_later_and_the_model_keeps_its_weights(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.BEST
    model = small_model(0)
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    snapshot, at_snapshot = checkpoint.snapshot(model), model.get_weights()
    model.set_weights(small_model(1).get_weights())  # training goes on
    model.optimizer.iterations.assign(5)
    checkpoint.save({"model": model}, path, weights=snapshot)
    for now, later in zip(model.get_weights(), small_model(1).get_weights(), strict=True):
        np.testing.assert_array_equal(now, later)
    assert int(model.optimizer.iterations) == 5
    saved = small_model(2)
    saved.load_weights(path)
    for loaded, expected in zip(saved.get_weights(), at_snapshot, strict=True):
        np.testing.assert_array_equal(loaded, expected)


def test_best_weights_wait_in_memory_for_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.BEST
    model = small_model(0)
    best_weights = model.get_weights()
    best = BestCheckpoint(path, "val/accuracy", "max", {"note": "run"}, None, main=True)
    best.set_model(model)
    best.on_epoch_end(0, {"val_accuracy": 0.9, "val_loss": 0.3})
    model.set_weights(small_model(1).get_weights())
    best.on_epoch_end(1, {"val_accuracy": 0.8, "val_loss": 0.4})  # worse: epoch 1 stays best
    assert not path.exists()
    best.flush()
    state = checkpoint.load(path)
    assert state == {"metrics": {"val/accuracy": 0.9, "val/loss": 0.3}, "epoch": 1, "note": "run"}
    saved = small_model(2)
    saved.load_weights(path)
    for loaded, expected in zip(saved.get_weights(), best_weights, strict=True):
        np.testing.assert_array_equal(loaded, expected)
    path.unlink()
    best.flush()  # nothing new since the last write
    assert not path.exists()


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.LAST
    checkpoint.save({"model": small_model(0), "step": 1}, path)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save({"model": FailsMidWrite(), "step": 2}, path)
    with pytest.raises(TypeError):  # a state JSON cannot hold fails before anything is written
        checkpoint.save({"model": small_model(0), "step": object()}, path)
    assert checkpoint.load(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [checkpoint.LAST]  # no temp file left


def test_process_killed_mid_save_leaves_a_readable_checkpoint(tmp_path: Path) -> None:
    """SIGKILL a process that saves a large checkpoint over and over: the file always loads."""
    path = tmp_path / checkpoint.LAST
    script = (
        "import itertools, sys, keras\n"
        "from {{ cookiecutter.package_name }}.training import checkpoint\n"
        "from pathlib import Path\n"
        "model = keras.Sequential([keras.Input((2000,)), keras.layers.Dense(2000)])\n"
        "for step in itertools.count():\n"
        "    checkpoint.save({'model': model, 'step': step}, Path(sys.argv[1]))\n"
        "    print(step, flush=True)\n"
    )
    kill_mid_save(script, path)
    assert checkpoint.load(path)["step"] >= 2
    model = keras.Sequential([keras.Input((2000,)), keras.layers.Dense(2000)])
    model.load_weights(path)


def test_resolve_finds_checkpoints_in_a_run_directory(tmp_path: Path) -> None:
    checkpoint.save({"model": small_model(0)}, tmp_path / "checkpoints" / checkpoint.BEST)
    found = storage.resolve(tmp_path, checkpoint.BEST)
    assert found == tmp_path / "checkpoints" / checkpoint.BEST
    with pytest.raises(FileNotFoundError, match=r"last\.weights\.h5"):
        storage.resolve(tmp_path, checkpoint.LAST)
