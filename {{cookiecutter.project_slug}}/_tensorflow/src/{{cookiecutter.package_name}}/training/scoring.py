"""Scoring a Keras classifier, and a trained one rebuilt from its checkpoint (for evaluate.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from ..data.batches import eval_dataset
from ..data.splits import AnySplit
from ..tracking.trackers import as_metrics
from .runtime import pick_device


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


def load_trained(model_config: Any, path: Path, state: dict, device: str) -> keras.Model:
    """The model a checkpoint holds, rebuilt from its config (for evaluation)."""
    from hydra.utils import instantiate

    pick_device(device)
    model = instantiate(
        model_config, input_shape=tuple(state["input_shape"]), num_classes=state["num_classes"]
    )
    model.load_weights(path, skip_mismatch=False)
    return model


def evaluate_split(model: keras.Model, split: AnySplit, batch_size: int, prefix: str) -> dict:
    """Mean loss and accuracy of `model` over `split`."""
    return as_metrics(scorer(model, eval_dataset(split, batch_size))().tolist(), prefix)
