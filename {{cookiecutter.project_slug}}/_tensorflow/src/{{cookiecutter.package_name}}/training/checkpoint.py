"""Keras checkpoints: the file (the weights in Keras's format and the run state as JSON, written
atomically in one file), and the callbacks that write it and restore a run from it.

`last.weights.h5` holds everything a run needs to continue; `best.weights.h5` the best weights.
Keras's ModelCheckpoint and BackupAndRestore do the deciding; the subclasses here add what a
preemptible run needs and Keras leaves out: files written atomically, the other callbacks'
counters kept in the last checkpoint, and a resume in the middle of an epoch.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import keras
import numpy as np

from ..config.schema import CheckpointConfig
from . import outputs, storage
from .callbacks import TrackProgress, as_number, keras_metric
from .runtime import Runtime, any_rank
from .storage import atomic_write

LAST = "last.weights.h5"
BEST = "best.weights.h5"
# The HDF5 attribute that holds the run state next to the Keras weights.
STATE_ATTRIBUTE = "run_state"


def save(state: dict, path: Path, weights: list[np.ndarray] | None = None) -> None:
    """`state["model"]`'s variables (and its optimizer's) in Keras's weights format; the rest of
    `state` as JSON in the same file, so one atomic rename publishes both. `weights` (from
    `snapshot`) are written instead of the model's current values, which are left as they are."""
    import h5py

    model, rest = state["model"], {key: value for key, value in state.items() if key != "model"}
    text = json.dumps(rest)  # before writing anything: a state JSON cannot hold fails early

    def write(tmp: Path) -> None:
        if weights is None:
            model.save_weights(tmp)
        else:
            current = snapshot(model)
            _assign(model, weights)
            try:
                model.save_weights(tmp)
            finally:
                _assign(model, current)
        with h5py.File(tmp, "a") as handle:
            handle.attrs[STATE_ATTRIBUTE] = text

    atomic_write(path, write, suffix=".weights.h5")  # Keras insists on the suffix


def snapshot(model: keras.Model) -> list[np.ndarray]:
    """Host copies of the model's and its optimizer's variables: a checkpoint to write later."""
    return [variable.numpy() for variable in _variables(model)]


def _assign(model: keras.Model, values: list[np.ndarray]) -> None:
    for variable, value in zip(_variables(model), values, strict=True):
        variable.assign(value)


def _variables(model: keras.Model) -> list:
    optimizer = getattr(model, "optimizer", None)
    return [*model.variables, *(optimizer.variables if optimizer is not None else [])]


def load(path: Path) -> dict:
    """The state saved next to the weights; `model.load_weights(path)` restores the weights."""
    import h5py

    with h5py.File(path, "r") as handle:
        return json.loads(handle.attrs[STATE_ATTRIBUTE])


class BestCheckpoint(keras.callbacks.ModelCheckpoint):
    """Keras's ModelCheckpoint for the best epoch: it decides what is best; the file is written
    atomically and carries the run's metadata, so `evaluate` rebuilds the model from it alone.

    A new best is kept in host memory and written by `flush`, which Backup calls before each
    write of the last checkpoint: one write per save interval, however often the best improves.
    """

    def __init__(
        self, path: Path, metric: str, mode: str, metadata: dict, mirror_uri: str | None, main: bool
    ) -> None:
        super().__init__(
            str(path), keras_metric(metric), mode=mode, save_best_only=True, save_weights_only=True
        )
        self.path, self.metadata, self.mirror_uri, self.main = path, metadata, mirror_uri, main
        self.best_val: dict[str, float] = {}  # every validation metric of the best epoch
        self.best_epoch: int | None = None
        self._unsaved: list | None = None  # the best weights, not yet written

    def _save_model(self, epoch: int, batch: int | None, logs: dict | None) -> None:
        # Replaces ModelCheckpoint's in-place write; the decision stays Keras's.
        if not self._should_save_model(epoch, batch, logs, self.filepath):
            return
        self.best_val = {
            f"val/{key.removeprefix('val_')}": float(value)
            for key, value in (logs or {}).items()
            if key.startswith("val_")
        }
        self.best_epoch = epoch + 1
        self._unsaved = snapshot(self.model)

    def flush(self) -> None:
        """Write the best weights if they changed since the last write."""
        if self._unsaved is None:
            return
        state = {"model": self.model, "metrics": self.best_val, "epoch": self.best_epoch}
        _save_on_every_worker(
            {**state, **self.metadata}, self.path, self.mirror_uri, self.main, self._unsaved
        )
        self._unsaved = None

    def get_state(self) -> dict:
        return {"best": as_number(self.best), "best_val": self.best_val, "epoch": self.best_epoch}

    def set_state(self, state: dict) -> None:
        self.best, self.best_val, self.best_epoch = state["best"], state["best_val"], state["epoch"]


class Backup(keras.callbacks.BackupAndRestore):
    """Keras's BackupAndRestore, extended to resume mid-epoch with everything a resume needs.

    Keras's own restores the weights, the optimizer and the epoch. This one writes
    checkpoints/last.weights.h5 atomically: after an epoch when `min_interval_s` have passed since
    the last write, after the last epoch, every `every_n_steps` steps and on a stop signal; each
    time it first has `best` write a new best, so last never runs ahead of best. Next to the
    weights it keeps the position in the epoch, the other callbacks' state, the dropout RNG state
    and the running epoch metrics, and `restore` hands each back to its owner.
    """

    def __init__(
        self,
        path: Path,
        settings: CheckpointConfig,
        track_progress: TrackProgress,
        best: BestCheckpoint,
        stateful: dict[str, Any],  # callbacks with get_state(), saved with the weights
        metadata: dict,
        runtime: Runtime,
        on_saved: Callable[[float], None] | None = None,  # with the seconds a save took
    ) -> None:
        super().__init__(
            str(path.parent), save_freq=settings.every_n_steps or "epoch", delete_checkpoint=False
        )
        self.path, self.track_progress, self.progress = (
            path,
            track_progress,
            track_progress.progress,
        )
        self.best, self.stateful, self.metadata, self.runtime = best, stateful, metadata, runtime
        self.mirror_uri, self.min_interval_s = settings.mirror_uri, settings.min_interval_s
        self._resume_state: dict | None = None
        self._saved_at = time.monotonic()
        self.on_saved = on_saved

    def restore(self, path: Path) -> None:
        """Continue the run saved at `path`: its progress and callback state now; its weights and
        RNG state when training begins (`_load_model`, called by Keras)."""
        state = load(path)
        vars(self.progress).update(state["progress"])
        for name, callback in self.stateful.items():
            callback.set_state(state["callbacks"][name])
        if self.progress.batches_done:
            self.track_progress.saved_metrics = state["epoch_metrics"]
        self._resume_state = state | {"path": path}
        p = self.progress
        outputs.log_resumed(path, p.epoch, p.batches_done, p.global_step)

    def _load_model(self) -> None:
        state = self._resume_state
        if state is None:
            return
        self.model.load_weights(state["path"])
        for variable, value in zip(_seed_states(self.model), state["rng"], strict=True):
            variable.assign(value)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.progress.stopped_early = bool(self.model.stop_training)  # set by EarlyStopping
        finished = self.progress.stopped_early or epoch + 1 >= self.params["epochs"]
        due = time.monotonic() - self._saved_at >= self.min_interval_s
        # Every worker takes part in a save: they agree on it, whatever their clocks say.
        if finished or any_rank(due, self.runtime):
            self._save_model()

    def _save_model(self) -> None:
        started = time.perf_counter()
        self.best.flush()
        state = {
            "model": self.model,
            "progress": asdict(self.progress),
            "callbacks": {name: cb.get_state() for name, cb in self.stateful.items()},
            "rng": [v.numpy().tolist() for v in _seed_states(self.model)],
            "epoch_metrics": [v.numpy().tolist() for v in self.model.metrics_variables],
            **self.metadata,
        }
        _save_on_every_worker(state, self.path, self.mirror_uri, self.runtime.is_main)
        self._saved_at = time.monotonic()
        if self.on_saved is not None:
            self.on_saved(time.perf_counter() - started)

    def save(self) -> None:
        """Write the last checkpoint now (a stop signal arrived)."""
        self._save_model()


def _save_on_every_worker(
    state: dict, path: Path, mirror_uri: str | None, main: bool, weights: list | None = None
) -> None:
    """Save on the main worker; the others save too (reading distributed variables takes all
    workers), to a scratch file they delete."""
    if main:
        save(state, path, weights)
        storage.mirror(path, mirror_uri)
        return
    with tempfile.TemporaryDirectory() as scratch:
        save(state, Path(scratch) / path.name, weights)


def _seed_states(model: keras.Model) -> list:
    """The dropout layers' random-generator states, which Keras's weight files leave out."""
    return [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]
