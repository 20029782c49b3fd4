"""tf.data pipelines from in-memory splits: a fixed order per epoch, resumable mid-epoch.

The order of epoch `e` is a stateless shuffle of (seed, e), so a run resumed halfway through an
epoch skips exactly the batches it already trained on and sees the rest in the same order.
tf.distribute splits every batch across the replicas (and workers) of the strategy.
"""

from __future__ import annotations

import math

import tensorflow as tf

from .data import Split


def batches_per_epoch(size: int, batch_size: int, even: bool) -> int:
    """Batches in one epoch; `even` drops a last, smaller batch (so every replica gets a share)."""
    return size // batch_size if even else math.ceil(size / batch_size)


def train_dataset(
    split: Split,
    batch_size: int,
    seed: int,
    epochs: range,
    skip_batches: int = 0,
    limit_batches: int | None = None,
    even: bool = False,
) -> tf.data.Dataset:
    """The batches of `epochs` back to back, leaving out the first `skip_batches` of the first."""
    x, y = tf.constant(split.x), tf.constant(split.y)
    size = len(split)
    per_epoch = batches_per_epoch(size, batch_size, even)
    if limit_batches:
        per_epoch = min(per_epoch, limit_batches)

    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        order = tf.random.experimental.stateless_shuffle(
            tf.range(size, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), epoch])
        )
        batches = tf.data.Dataset.from_tensor_slices(order).batch(batch_size, drop_remainder=even)
        return batches.take(per_epoch)

    stream = tf.data.Dataset.range(epochs.start, epochs.stop).flat_map(epoch_batches)
    return (
        stream.skip(skip_batches)
        .map(lambda index: (tf.gather(x, index), tf.gather(y, index)))
        .prefetch(tf.data.AUTOTUNE)
    )


def eval_dataset(
    split: Split, batch_size: int, limit_batches: int | None = None
) -> tf.data.Dataset:
    """Every sample once, in order (the first `limit_batches` batches only, when set)."""
    dataset = tf.data.Dataset.from_tensor_slices((split.x, split.y)).batch(batch_size)
    if limit_batches:
        dataset = dataset.take(limit_batches)
    return dataset.prefetch(tf.data.AUTOTUNE)
