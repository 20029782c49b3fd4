"""The Keras training loop: `Model.fit` with the callbacks in callbacks.py, and scoring.

Everything a run needs to continue exactly where it stopped (weights, optimizer, position in the
epoch, early-stopping and best-checkpoint state, dropout RNG state) goes into
`checkpoints/last.weights.h5`: after an epoch when `callbacks.checkpoint.min_interval_s` have
passed since the last write, after the last epoch, and whenever a stop signal arrives.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from . import checkpoint
from .callbacks import (
    Backup,
    BestCheckpoint,
    EarlyStopping,
    Progress,
    StopOnSignal,
    TrackMetrics,
    TrackProgress,
    Validate,
)
from .data import Split, Splits
from .inputs import batches_per_epoch, eval_dataset, train_dataset
from .outputs import as_metrics
from .runtime import Runtime, pick_device
from .schema import CallbacksConfig, Mode, Precision, TrainerConfig
from .signals import GracefulStop
from .tracking import Tracker

log = logging.getLogger(__name__)


def dtype_policy(choice: str | Precision, device: str) -> str:
    """The Keras dtype policy for `trainer.precision`."""
    precision = Precision(choice).value
    if precision == "mixed":
        precision = "bf16" if device == "cpu" or _gpus_have_bf16() else "fp16"
    return {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[precision]


def _gpus_have_bf16() -> bool:
    """bfloat16 tensor cores: NVIDIA compute capability 8.0 (Ampere) and later."""
    gpus = tf.config.list_physical_devices("GPU")
    details = [tf.config.experimental.get_device_details(gpu) for gpu in gpus]
    return all(detail.get("compute_capability", (0, 0)) >= (8, 0) for detail in details)


def scorer(
    model: keras.Model, dataset: tf.data.Dataset, strategy: tf.distribute.Strategy | None = None
) -> Callable[[], np.ndarray]:
    """A function that returns the summed cross-entropy, correct predictions and sample count of
    `model` over `dataset`. Under a strategy each replica and worker scores its share and the sums
    are combined. The step is traced once, on the first call, and reused by every later call."""
    strategy = strategy or tf.distribute.get_strategy()
    batches = strategy.experimental_distribute_dataset(dataset)

    def sums(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        logits = tf.cast(model(x, training=False), tf.float32)
        loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        correct = tf.cast(tf.argmax(logits, 1) == y, tf.float32)
        count = tf.cast(tf.size(y), tf.float32)
        return tf.stack([tf.reduce_sum(loss), tf.reduce_sum(correct), count])

    # A signature with an open batch size: the last, smaller batch needs no second trace.
    @tf.function(input_signature=[batches.element_spec])
    def step(batch: tuple) -> tf.Tensor:
        return strategy.reduce("SUM", strategy.run(sums, args=batch), axis=None)

    def score() -> np.ndarray:
        totals = tf.zeros(3)
        for batch in batches:
            totals += step(batch)
        return totals.numpy().astype(np.float64)

    return score


def load_trained(model_config: object, path: Path, state: dict, device: str) -> keras.Model:
    """The model a checkpoint holds, rebuilt from its config (for evaluation)."""
    from hydra.utils import instantiate

    pick_device(device)
    model = instantiate(
        model_config, input_shape=tuple(state["input_shape"]), num_classes=state["num_classes"]
    )
    model.load_weights(path, skip_mismatch=False)
    return model


def evaluate_split(model: keras.Model, split: Split, batch_size: int, prefix: str) -> dict:
    """Mean loss and accuracy of `model` over `split`."""
    return as_metrics(scorer(model, eval_dataset(split, batch_size))().tolist(), prefix)


def _work_around_keras_multi_worker(model: keras.Model) -> None:
    """Keras 3's fit fails under MultiWorkerMirroredStrategy (tensorflow/tensorflow#72388): it
    reduces one distributed (x, y) batch to build the model, and averages each step's scalar logs
    along an axis they lack. Build on first use instead, and average the scalars as they are."""
    from keras.src.backend.tensorflow import trainer

    model._distribute_strategy = None  # fit runs under the strategy's scope instead
    original = trainer.reduce_per_replica

    def reduce_per_replica(values: object, strategy: object, reduction: str) -> object:
        if reduction in ("auto", "mean") and trainer._collective_all_reduce_multi_worker(strategy):
            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original(values, strategy, reduction)

    trainer.reduce_per_replica = reduce_per_replica


def build_optimizer(
    make_optimizer: partial,
    make_scheduler: Callable[..., object],
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
    """Fits a classifier with cross-entropy. `settings` and `callbacks` are `cfg.trainer` and
    `cfg.callbacks` as plain dataclasses; `extra_state` (config, data shape) goes into every
    checkpoint."""

    def __init__(
        self,
        make_model: Callable[[], keras.Model],
        make_optimizer: partial,
        make_scheduler: Callable[..., object],
        settings: TrainerConfig,
        callbacks: CallbacksConfig,
        runtime: Runtime,
        tracker: Tracker,
        checkpoint_dir: Path,
        batch_size: int,
        seed: int,
        num_workers: int = 0,
        extra_state: dict | None = None,
    ) -> None:
        del num_workers  # tf.data prepares batches in its own threads
        self.settings, self.callbacks_config = settings, callbacks
        self.runtime, self.tracker = runtime, tracker
        self.checkpoint_dir = checkpoint_dir
        self.batch_size, self.seed = batch_size, seed
        self.extra_state = extra_state or {}
        self.make_optimizer, self.make_scheduler = make_optimizer, make_scheduler
        keras.config.set_dtype_policy(dtype_policy(settings.precision, runtime.device))
        with runtime.strategy.scope():
            self.model = make_model()
        self.progress = Progress()

    @property
    def parameter_count(self) -> int:
        return self.model.count_params()

    # ---- training -------------------------------------------------------------------------

    def fit(self, splits: Splits, stop: GracefulStop, resume_from: Path | None = None) -> dict:
        """Train until max_epochs or early stopping; returns the best validation metrics."""
        s, ckpt = self.settings, self.callbacks_config.checkpoint
        main = self.runtime.is_main
        # Several replicas split every batch: a smaller last batch is dropped, as DDP does.
        even = self.runtime.replicas > 1
        per_epoch = batches_per_epoch(len(splits.train), self.batch_size, even)
        if s.limit_train_batches:
            per_epoch = min(per_epoch, s.limit_train_batches)
        total_steps = per_epoch * s.max_epochs // s.accumulate_grad_batches
        with self.runtime.strategy.scope():
            self.model.compile(
                optimizer=build_optimizer(
                    self.make_optimizer, self.make_scheduler, max(1, total_steps), s
                ),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
                jit_compile=s.compile,
            )
            # Built now, not in the first step: variables created there make tf.function trace
            # the whole train step twice.
            self.model.optimizer.build(self.model.trainable_variables)

        state = None
        if resume_from is not None:
            state = checkpoint.load(resume_from) | {"path": resume_from}
            self.progress = Progress(**state["progress"])
        progress = self.progress
        track_progress = TrackProgress(progress, per_epoch, s.accumulate_grad_batches)
        stopping = self.callbacks_config.early_stopping
        early_stopping = (
            EarlyStopping(stopping.monitor, Mode(stopping.mode).value, stopping.patience,
                          stopping.min_delta)
            if stopping
            else None
        )  # fmt: skip
        self.best = BestCheckpoint(
            self.checkpoint_dir / checkpoint.BEST,
            ckpt.monitor,
            Mode(ckpt.mode).value,
            self.extra_state,
            ckpt.mirror_uri,
            main,
        )
        stateful = {"best": self.best}
        if early_stopping is not None:
            stateful["early_stopping"] = early_stopping
        backup = Backup(
            self.checkpoint_dir / checkpoint.LAST,
            ckpt.every_n_steps,
            ckpt.min_interval_s,
            progress,
            self.best,
            stateful,
            self.extra_state,
            ckpt.mirror_uri,
            self.runtime,
        )
        if state is not None:
            backup.resume_state = state
            for name, callback in stateful.items():
                callback.set_state(state["callbacks"][name])
            if progress.batches_done:
                track_progress.saved_metrics = state["epoch_metrics"]
            log.info(
                "resumed from %s: epoch %d, batch %d, step %d",
                resume_from, progress.epoch, progress.batches_done, progress.global_step,
            )  # fmt: skip

        if not progress.stopped_early and progress.epoch < s.max_epochs:
            val = eval_dataset(splits.val, self.batch_size, s.limit_eval_batches)
            score_val = scorer(self.model, val, self.runtime.strategy)
            callbacks = [
                track_progress,
                Validate(lambda: as_metrics(score_val().tolist(), "val")),
                *([early_stopping] if early_stopping else []),
                self.best,
                TrackMetrics(self.tracker, progress, s.log_every_n_steps, s.max_epochs),
                backup,
                StopOnSignal(stop, backup, self.runtime),
            ]
            train = train_dataset(
                splits.train,
                self.batch_size,
                self.seed,
                range(progress.epoch, s.max_epochs),
                skip_batches=progress.batches_done,
                limit_batches=s.limit_train_batches,
                even=even,
            )
            if self.runtime.distributed:
                _work_around_keras_multi_worker(self.model)
            with self.runtime.strategy.scope():
                self.model.fit(
                    train,
                    epochs=s.max_epochs,
                    initial_epoch=progress.epoch,
                    steps_per_epoch=per_epoch,
                    callbacks=callbacks,
                    shuffle=False,  # the dataset has its own, resumable order
                    verbose=1 if self._show_bar else 0,
                )
        if progress.stopped_early and early_stopping is not None:
            log.info(
                "early stopping: %s has not improved for %d epochs",
                early_stopping.metric,
                early_stopping.patience,
            )
        return {**self.best.best_val, "best_epoch": self.best.best_epoch}

    @property
    def _show_bar(self) -> bool:
        setting = self.settings.progress_bar
        on = sys.stderr.isatty() if setting is None else setting
        return on and self.runtime.is_main

    # ---- evaluation -----------------------------------------------------------------------

    def test(self, split: Split) -> dict[str, float]:
        """Mean loss and accuracy over `split`, in this process alone (the main one)."""
        return evaluate_split(self.model, split, self.batch_size, "test")

    def load_best_weights(self) -> dict:
        """Put the best checkpoint's weights into the model (for the final test)."""
        path = self.checkpoint_dir / checkpoint.BEST
        self.model.load_weights(path)
        return checkpoint.load(path)
