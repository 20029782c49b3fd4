"""The Keras callbacks of a training run: progress, validation, early stopping, checkpoints,
metrics, signals.

Keras's EarlyStopping, ModelCheckpoint and BackupAndRestore do the deciding. The subclasses here
add what a preemptible run needs and Keras leaves out: their counters travel in the last
checkpoint, files are written atomically, and a run resumes in the middle of an epoch.

Keras's TensorFlow backend runs the per-batch hooks in line after every step, so those here only
count and read a flag; anything that costs (logging, writing files) happens every N steps or at
the end of an epoch.
"""

from __future__ import annotations

import logging
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import keras
import tensorflow as tf

from . import checkpoint, storage
from .runtime import Runtime, any_rank
from .signals import GracefulStop, StopRequested
from .tracking import Tracker

log = logging.getLogger(__name__)


def keras_metric(name: str) -> str:
    """Keras's name for a metric of ours: val/loss -> val_loss, train/loss -> loss."""
    split, _, metric = name.rpartition("/")
    return {"val": f"val_{metric}", "train": metric}.get(split, name)


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass
class Progress:
    """Where training stands; part of every checkpoint."""

    epoch: int = 0  # epochs completed
    batches_done: int = 0  # batches trained in the current epoch, for a mid-epoch resume
    global_step: int = 0  # optimizer steps taken
    stopped_early: bool = False  # a re-run of a stopped run only re-tests


class TrackProgress(keras.callbacks.Callback):
    """Counts epochs, batches and optimizer steps; ends a resumed, half-done epoch on time.

    First in the callback list: it resets Keras's stop flag at the end of the epoch it cut short,
    before EarlyStopping sets it for real.
    """

    def __init__(self, progress: Progress, batches_per_epoch: int, accumulate: int) -> None:
        super().__init__()
        self.progress = progress
        self.batches_per_epoch = batches_per_epoch
        self.accumulate = accumulate
        # The metrics' running sums (loss and accuracy totals and counts) of a half-done epoch.
        self.saved_metrics: list | None = None
        self._batches_total = progress.global_step * accumulate
        self._cut_short = False

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self.saved_metrics is not None:
            # Keras creates the metrics' variables in the first step; its sums go on from there.
            for variable, value in zip(
                self.model.metrics_variables, self.saved_metrics, strict=True
            ):
                variable.assign_add(value)
            self.saved_metrics = None
        progress = self.progress
        progress.batches_done += 1
        self._batches_total += 1
        progress.global_step = self._batches_total // self.accumulate
        if progress.batches_done == self.batches_per_epoch and batch + 1 < self.batches_per_epoch:
            self._cut_short = True  # the rest of an epoch begun before the resume
            self.model.stop_training = True

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.progress.epoch = epoch + 1
        self.progress.batches_done = 0
        if self._cut_short:
            self.model.stop_training, self._cut_short = False, False


class Validate(keras.callbacks.Callback):
    """Scores the validation split after every epoch and adds its metrics to the epoch's logs,
    under Keras's names (val_loss), for the callbacks after it to read.

    In place of fit's own validation, which each epoch sets up a new iterator, resets the metrics
    and calls every callback after every batch.
    """

    def __init__(self, score: Callable[[], dict[str, float]]) -> None:
        super().__init__()
        self.score = score

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if logs is not None:
            logs.update({keras_metric(name): value for name, value in self.score().items()})


class EarlyStopping(keras.callbacks.EarlyStopping):
    """Keras's early stopping; its counters are saved in checkpoints and go on after a resume."""

    def __init__(self, metric: str, mode: str, patience: int, min_delta: float) -> None:
        super().__init__(keras_metric(metric), min_delta, patience, mode=mode)
        self.metric = metric
        self.restored: dict | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        super().on_train_begin(logs)  # resets the counters, which a resumed run carries on
        if self.restored:
            self.wait, self.best, self.best_epoch = (
                self.restored["wait"], self.restored["best"], self.restored["best_epoch"],
            )  # fmt: skip

    def get_state(self) -> dict:
        return {"wait": self.wait, "best": _number(self.best), "best_epoch": self.best_epoch}

    def set_state(self, state: dict) -> None:
        self.restored = state


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
        self._unsaved = checkpoint.snapshot(self.model)

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
        return {"best": _number(self.best), "best_val": self.best_val, "epoch": self.best_epoch}

    def set_state(self, state: dict) -> None:
        self.best, self.best_val, self.best_epoch = state["best"], state["best_val"], state["epoch"]


class Backup(keras.callbacks.BackupAndRestore):
    """Keras's BackupAndRestore, extended to resume mid-epoch with everything a resume needs.

    Keras's own restores the weights, the optimizer and the epoch. This one writes
    checkpoints/last.weights.h5 atomically: after an epoch when `min_interval_s` have passed since
    the last write, after the last epoch, every `every_n_steps` steps and on a stop signal; each
    time it first has `best` write a new best, so last never runs ahead of best. Next to the
    weights it keeps the position in the epoch, the other callbacks' state, the dropout RNG state
    and the running epoch metrics. On a re-run it loads the weights and RNG state when training
    begins; the trainer hands the rest back to their owners.
    """

    def __init__(
        self,
        path: Path,
        every_n_steps: int | None,
        min_interval_s: float,
        progress: Progress,
        best: BestCheckpoint,
        stateful: dict[str, Any],  # callbacks with get_state(), saved with the weights
        metadata: dict,
        mirror_uri: str | None,
        runtime: Runtime,
    ) -> None:
        super().__init__(
            str(path.parent), save_freq=every_n_steps or "epoch", delete_checkpoint=False
        )
        self.path, self.progress, self.best, self.stateful = path, progress, best, stateful
        self.metadata, self.mirror_uri, self.runtime = metadata, mirror_uri, runtime
        self.min_interval_s = min_interval_s
        self.resume_state: dict | None = None
        self._saved_at = time.monotonic()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.progress.stopped_early = bool(self.model.stop_training)  # set by EarlyStopping
        finished = self.progress.stopped_early or epoch + 1 >= self.params["epochs"]
        due = time.monotonic() - self._saved_at >= self.min_interval_s
        # Every worker takes part in a save: they agree on it, whatever their clocks say.
        if finished or any_rank(due, self.runtime):
            self._save_model()

    def _save_model(self) -> None:
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

    def save(self) -> None:
        """Write the last checkpoint now (a stop signal arrived)."""
        self._save_model()

    def _load_model(self) -> None:
        state = self.resume_state
        if state is None:
            return
        self.model.load_weights(state["path"])
        for variable, value in zip(_seed_states(self.model), state["rng"], strict=True):
            variable.assign(value)


def _save_on_every_worker(
    state: dict, path: Path, mirror_uri: str | None, main: bool, weights: list | None = None
) -> None:
    """Save on the main worker; the others save too (reading distributed variables takes all
    workers), to a scratch file they delete."""
    if main:
        checkpoint.save(state, path, weights)
        storage.mirror(path, mirror_uri)
        return
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint.save(state, Path(scratch) / path.name, weights)


def _seed_states(model: keras.Model) -> list:
    """The dropout layers' random-generator states, which Keras's weight files leave out."""
    return [v for v in model.non_trainable_variables if v.path.endswith("seed_generator_state")]


class TrackMetrics(keras.callbacks.Callback):
    """Sends Keras's metrics, under this project's names, to metrics.jsonl and the trackers."""

    def __init__(
        self, tracker: Tracker, progress: Progress, log_every: int, max_epochs: int
    ) -> None:
        super().__init__()
        self.tracker, self.progress = tracker, progress
        self.log_every, self.max_epochs = log_every, max_epochs
        self._last_logged = progress.global_step
        self._started = 0.0
        self._read_lr: Callable[[], Any] | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        optimizer = self.model.optimizer
        if isinstance(optimizer.learning_rate, keras.Variable):  # a constant: a cheap read
            self._read_lr = lambda: optimizer.learning_rate.numpy()
        else:  # a schedule: a dozen ops, a third of their eager cost when compiled
            self._read_lr = tf.function(lambda: tf.identity(optimizer.learning_rate))

    def _lr(self) -> float:
        return float(self._read_lr())

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = self.progress.global_step
        if step != self._last_logged and step % self.log_every == 0:
            self._last_logged = step
            self.tracker.log({"train/loss": float(logs["loss"]), "train/lr": self._lr()}, step=step)

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs or {}
        metrics = {"train/epoch_loss": float(logs["loss"])}
        metrics |= {
            (f"val/{key[4:]}" if key.startswith("val_") else f"train/{key}"): float(value)
            for key, value in logs.items()
            if key not in ("loss", "learning_rate")
        }
        metrics["epoch"] = epoch + 1
        self.tracker.log(metrics, step=self.progress.global_step)
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        log.info(
            "epoch %d/%d  %s  lr %.2e  (%.1fs)",
            epoch + 1, self.max_epochs, shown, self._lr(), time.perf_counter() - self._started,
        )  # fmt: skip


class StopOnSignal(keras.callbacks.Callback):
    """After a SIGTERM/SIGINT: write the last checkpoint at the end of this step, then stop."""

    def __init__(self, stop: GracefulStop, backup: Backup, runtime: Runtime) -> None:
        super().__init__()
        self.stop, self.backup, self.runtime = stop, backup, runtime

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if any_rank(self.stop.requested, self.runtime):
            self.backup.save()
            raise StopRequested(self.stop.signum or signal.SIGTERM)
