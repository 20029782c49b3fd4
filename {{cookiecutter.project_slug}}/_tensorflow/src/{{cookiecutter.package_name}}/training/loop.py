"""The Keras training loop: `Model.fit` with the callbacks in callbacks.py.

Everything a run needs to continue exactly where it stopped (weights, optimizer, position in the
epoch, early-stopping and best-checkpoint state, dropout RNG state) goes into
`checkpoints/last.weights.h5`: after an epoch when `callbacks.checkpoint.min_interval_s` have
passed since the last write, after the last epoch, and whenever a stop signal arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras

from ..config.schema import TrainerConfig
from ..data.batches import batches_per_epoch, eval_dataset, shard_errors, train_dataset
from ..data.splits import AnySplit, Splits
from ..tracking.trackers import Tracker, as_metrics
from . import checkpoint, outputs
from .callbacks import (
    EarlyStopping,
    Progress,
    ProgressBar,
    StepLogs,
    StopOnSignal,
    TrackMetrics,
    TrackProgress,
    Validate,
)
from .checkpoint import Backup, BestCheckpoint
from .contract import TrainerParts
from .runtime import Runtime, dtype_policy, place_model, threads, use_tf32
from .scoring import evaluate_split, scorer
from .signals import GracefulStop


def build_optimizer(
    make_optimizer: Any,
    make_scheduler: Callable[..., Any],
    total_steps: int,
    settings: TrainerConfig,
) -> keras.optimizers.Optimizer:
    """configs/optimizer/ names a Keras optimizer class (Hydra hands it over as a partial); its
    `lr` is the peak of the schedule from configs/scheduler/, the other keys go to the class."""
    options = dict(make_optimizer.keywords)
    schedule = make_scheduler(options.pop("lr"), total_steps=total_steps)
    accumulate = settings.accumulate_grad_batches
    return make_optimizer.func(
        learning_rate=schedule,
        global_clipnorm=settings.gradient_clip_norm,
        gradient_accumulation_steps=accumulate if accumulate > 1 else None,
        **options,
    )


class Trainer:
    """Fits a classifier with cross-entropy (the framework contract: contract.py)."""

    def __init__(
        self, parts: TrainerParts, runtime: Runtime, tracker: Tracker, checkpoint_dir: Path
    ) -> None:
        self.parts, self.settings, self.data = parts, parts.trainer, parts.data
        self.runtime, self.tracker, self.checkpoint_dir = runtime, tracker, checkpoint_dir
        self.policy = dtype_policy(self.settings.precision, runtime.device)
        keras.config.set_dtype_policy(self.policy)
        self.tf32 = use_tf32(runtime.device, self.settings.tf32)
        with runtime.strategy.scope():
            self.model = parts.make_model()
        place_model(self.model, runtime)
        self.progress = Progress()
        ckpt = parts.callbacks.checkpoint
        self.best = BestCheckpoint(
            checkpoint_dir / checkpoint.BEST,
            ckpt.monitor,
            ckpt.mode,
            parts.extra_state,
            ckpt.mirror_uri,
            runtime.is_main,
        )
        stopping = parts.callbacks.early_stopping
        self.early_stopping = (
            EarlyStopping(stopping.monitor, stopping.mode, stopping.patience, stopping.min_delta)
            if stopping
            else None
        )

    @property
    def ran_on(self) -> dict[str, str | int]:
        """Where and how the run trained, for metrics.json: the device, and the precision (tf32:
        fp32 whose matmuls and convolutions ran in TensorFloat-32)."""
        precision = {"float32": "fp32", "mixed_bfloat16": "bf16", "mixed_float16": "fp16"}
        name = precision[self.policy]
        if name == "fp32" and self.tf32:
            name = "tf32"
        replicas = self.runtime.replicas
        device = self.runtime.device + (f" x {replicas}" if replicas > 1 else "")
        return {"device": device, "precision": name, "threads": threads()}

    @property
    def parameter_count(self) -> int:
        return self.model.count_params()

    @property
    def epochs_done(self) -> int:
        return self.progress.epoch

    # ---- training -------------------------------------------------------------------------

    def fit(self, splits: Splits, stop: GracefulStop, resume_from: Path | None = None) -> dict:
        """Train until max_epochs or early stopping; returns the best validation metrics."""
        s, progress = self.settings, self.progress
        # Several replicas split every batch: a smaller last batch is dropped, as DDP does.
        even = self.runtime.replicas > 1
        per_epoch = batches_per_epoch(len(splits.train), self.data.batch_size, even)
        if s.limit_train_batches:
            per_epoch = min(per_epoch, s.limit_train_batches)
        self._compile(max(1, per_epoch * s.max_epochs // s.accumulate_grad_batches))
        bs = self.data.batch_size
        epoch_samples = per_epoch * bs if even else min(len(splits.train), per_epoch * bs)
        batch_sizes = (bs, epoch_samples - (per_epoch - 1) * bs)
        callbacks, backup = self._callbacks(splits.val, stop, per_epoch, batch_sizes)
        if resume_from is not None:
            backup.restore(resume_from)
        if not progress.stopped_early and progress.epoch < s.max_epochs:
            train = train_dataset(
                splits.train,
                self.data.batch_size,
                self.parts.seed,
                range(progress.epoch, s.max_epochs),
                skip_batches=progress.batches_done,
                limit_batches=s.limit_train_batches,
                even=even,
            )
            step_logs = StepLogs(
                callbacks, add_history=True, model=self.model, epochs=s.max_epochs, steps=per_epoch
            )
            with self.runtime.strategy.scope(), shard_errors():
                self.model.fit(
                    train,
                    epochs=s.max_epochs,
                    initial_epoch=progress.epoch,
                    steps_per_epoch=per_epoch,
                    callbacks=step_logs,
                    shuffle=False,  # the dataset has its own, resumable order
                    verbose=0,  # Keras's bar reads every step's loss: ProgressBar counts instead
                )
        if progress.stopped_early and self.early_stopping is not None:
            outputs.log_early_stop(self.early_stopping.metric, self.early_stopping.patience)
        return {**self.best.best_val, "best_epoch": self.best.best_epoch}

    def _compile(self, total_steps: int) -> None:
        s = self.settings
        with self.runtime.strategy.scope():
            self.model.compile(
                optimizer=build_optimizer(
                    self.parts.make_optimizer, self.parts.make_scheduler, total_steps, s
                ),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                jit_compile=s.compile,
            )
            # Built now, not in the first step: variables created there make tf.function trace
            # the whole train step twice.
            self.model.optimizer.build(self.model.trainable_variables)

    def _callbacks(
        self, val: AnySplit, stop: GracefulStop, per_epoch: int, batch_sizes: tuple[int, int]
    ) -> tuple[list[keras.callbacks.Callback], Backup]:
        """The callbacks of `fit`, in the order Keras must call them.

        TrackProgress first: it resets the stop flag of an epoch it cut short before
        EarlyStopping sets it for real. Validate before everything that reads `val_*` logs.
        Backup after EarlyStopping and BestCheckpoint (it saves their state), and before
        StopOnSignal (which has it write the last checkpoint).
        """
        s, ckpt = self.settings, self.parts.callbacks.checkpoint
        live = self.tracker.live  # Prometheus counters, or nothing (monitoring=none)
        track_progress = TrackProgress(
            self.progress, per_epoch, s.accumulate_grad_batches, live, batch_sizes
        )
        stateful: dict[str, Any] = {"best": self.best}
        if self.early_stopping is not None:
            stateful["early_stopping"] = self.early_stopping
        backup = Backup(
            self.checkpoint_dir / checkpoint.LAST,
            ckpt,
            track_progress,
            self.best,
            stateful,
            self.parts.extra_state,
            self.runtime,
            live.checkpoint_saved,
        )
        score_val = scorer(
            self.model, eval_dataset(val, self.data.batch_size, s.limit_eval_batches),
            self.runtime.strategy,
        )  # fmt: skip
        callbacks = [
            track_progress,
            Validate(lambda: as_metrics(score_val().tolist(), "val")),
            *([self.early_stopping] if self.early_stopping else []),
            self.best,
            TrackMetrics(self.tracker, self.progress, s.log_every_n_steps, s.max_epochs),
            backup,
            StopOnSignal(stop, backup, self.runtime, self.progress, s.stop_check_every_n_steps),
        ]
        if outputs.show_progress_bar(s.progress_bar, self.runtime.is_main):
            # Second: it closes the bar at an epoch's end before the epoch's line is logged.
            callbacks.insert(1, ProgressBar(self.progress, per_epoch, s.max_epochs))
        return callbacks, backup

    # ---- evaluation -----------------------------------------------------------------------

    def test(self, split: AnySplit) -> dict[str, float]:
        """Mean loss and accuracy over `split`, in this process alone (the main one)."""
        with shard_errors():
            return evaluate_split(self.model, split, self.data.batch_size, "test")

    def load_best_weights(self) -> None:
        """Put the best checkpoint's weights into the model (for the final test)."""
        self.model.load_weights(self.checkpoint_dir / checkpoint.BEST)
