"""The Keras callbacks of a training run besides checkpoints (checkpoint.py): progress,
validation, early stopping, metrics, stop signals.

Keras's EarlyStopping does the deciding; the subclass here carries its counters in the last
checkpoint, so a resumed run goes on counting.

Keras's TensorFlow backend runs the per-batch hooks in line after every step, so those here only
count and read a flag; anything that costs (logging, writing files) happens every N steps or at
the end of an epoch. `StepLogs` hands them each step's logs as tensors: Keras's own list copies
every value to the host after every step, which makes the host wait for the step to finish.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import keras
import tensorflow as tf
from tqdm import tqdm

from ..tracking.live import NoLiveMetrics
from ..tracking.trackers import Tracker
from . import outputs
from .runtime import Runtime, any_rank
from .signals import GracefulStop, StopRequested

if TYPE_CHECKING:
    from .checkpoint import Backup


def keras_metric(name: str) -> str:
    """Keras's name for a metric of ours: val/loss -> val_loss, train/loss -> loss."""
    split, _, metric = name.rpartition("/")
    return {"val": f"val_{metric}", "train": metric}.get(split, name)


def as_number(value: Any) -> float | None:
    return None if value is None else float(value)


class StepLogs(keras.callbacks.CallbackList):
    """Keras's callback list, but a step's logs reach the callbacks as they are (tensors).

    Keras converts every log value to a Python number before each `on_train_batch_end`: a wait
    for the GPU at every step. The callbacks here read a value only when they use it.
    """

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        for callback in self.callbacks:
            callback.on_train_batch_end(batch, logs)


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

    def __init__(
        self,
        progress: Progress,
        batches_per_epoch: int,
        accumulate: int,
        live: NoLiveMetrics | None = None,
        batch_sizes: tuple[int, int] = (0, 0),  # (every batch's, the epoch's last batch's)
    ) -> None:
        super().__init__()
        self.progress = progress
        self.batches_per_epoch = batches_per_epoch
        self.accumulate = accumulate
        self.live = live or NoLiveMetrics()  # Prometheus counters, or nothing
        self.batch_sizes = batch_sizes
        # The metrics' running sums (loss and accuracy totals and counts) of a half-done epoch.
        self.saved_metrics: list | None = None
        self._batches_total = 0
        self._cut_short = False

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._batches_total = self.progress.global_step * self.accumulate  # resumed: not 0

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
        stepped = self._batches_total // self.accumulate > progress.global_step
        progress.global_step = self._batches_total // self.accumulate
        last = progress.batches_done == self.batches_per_epoch
        self.live.batch(self.batch_sizes[last], stepped)
        if progress.batches_done == self.batches_per_epoch and batch + 1 < self.batches_per_epoch:
            self._cut_short = True  # the rest of an epoch begun before the resume
            self.model.stop_training = True

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self.live.epoch_started()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.progress.epoch = epoch + 1
        self.progress.batches_done = 0
        if self._cut_short:
            self.model.stop_training, self._cut_short = False, False


class ProgressBar(keras.callbacks.Callback):
    """A bar of the epoch's batches: it counts steps and reads no values, so no step waits on it."""

    def __init__(self, progress: Progress, batches_per_epoch: int, max_epochs: int) -> None:
        super().__init__()
        self.progress, self.batches_per_epoch, self.max_epochs = (
            progress,
            batches_per_epoch,
            max_epochs,
        )
        self._bar: tqdm | None = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._bar = tqdm(
            total=self.batches_per_epoch,
            initial=self.progress.batches_done,
            desc=f"epoch {epoch + 1}/{self.max_epochs}",
            leave=False,
        )

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        if self._bar is not None:
            self._bar.update()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    on_train_end = on_epoch_end  # a stop signal ends training inside an epoch


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
        return {"wait": self.wait, "best": as_number(self.best), "best_epoch": self.best_epoch}

    def set_state(self, state: dict) -> None:
        self.restored = state


class TrackMetrics(keras.callbacks.Callback):
    """Sends Keras's metrics, under this project's names, to metrics.jsonl and the trackers."""

    def __init__(
        self, tracker: Tracker, progress: Progress, log_every: int, max_epochs: int
    ) -> None:
        super().__init__()
        self.tracker, self.progress = tracker, progress
        self.log_every, self.max_epochs = log_every, max_epochs
        self._last_logged = 0
        self._started = 0.0
        self._read_lr: Callable[[], Any] | None = None

    def on_train_begin(self, logs: dict | None = None) -> None:
        self._last_logged = self.progress.global_step  # resumed: not 0
        optimizer = self.model.optimizer
        if isinstance(optimizer.learning_rate, keras.Variable):  # a constant: a cheap read
            self._read_lr = lambda: optimizer.learning_rate.numpy()
        else:  # a schedule: a dozen ops, a third of their eager cost when compiled
            self._read_lr = tf.function(lambda: tf.identity(optimizer.learning_rate))

    def _lr(self) -> float:
        assert self._read_lr is not None, "read before training began"
        return float(self._read_lr())

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        step = self.progress.global_step
        if step != self._last_logged and step % self.log_every == 0:
            self._last_logged = step
            loss = float((logs or {})["loss"])
            self.tracker.log({"train/loss": loss, "train/lr": self._lr()}, step=step)

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
        seconds = time.perf_counter() - self._started
        outputs.log_epoch(epoch + 1, self.max_epochs, metrics, self._lr(), seconds)


class StopOnSignal(keras.callbacks.Callback):
    """After a SIGTERM/SIGINT: write the last checkpoint at the end of this step, then stop."""

    def __init__(
        self, stop: GracefulStop, backup: Backup, runtime: Runtime, progress: Progress, every: int
    ) -> None:
        super().__init__()
        self.stop, self.backup, self.runtime = stop, backup, runtime
        self.progress, self.every = progress, every

    def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
        # Several workers agree every `every` steps (a collective, which waits); one, every step.
        if self.runtime.distributed and self.progress.global_step % self.every:
            return
        if any_rank(self.stop.requested, self.runtime):
            self.backup.save()
            raise StopRequested(self.stop.signum or signal.SIGTERM)
