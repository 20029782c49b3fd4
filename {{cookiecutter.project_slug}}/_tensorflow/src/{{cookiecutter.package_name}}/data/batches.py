"""tf.data pipelines from in-memory splits or streamed shards: a fixed order per epoch,
resumable mid-epoch.

The order of epoch `e` is a function of (seed, e) alone (a stateless shuffle in memory;
data/shards/stream.py for shards), so a run resumed halfway through an epoch skips exactly the
batches it already trained on and sees the rest in the same order. tf.distribute splits every
batch across the replicas (and workers) of the strategy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager

import tensorflow as tf

from .shards.index import ShardError
from .shards.stream import ShardSplit
from .splits import Split


@contextmanager
def shard_errors() -> Iterator[None]:
    """A shard's error reaches Python from tf.data as an OpError whose text holds it (and the
    generator's traceback): raise it again as itself, so it ends the run in one line."""
    try:
        yield
    except tf.errors.OpError as error:
        found = re.search(r"ShardError: (.+)", error.message)
        if found is None:
            raise
        raise ShardError(found.group(1).strip()) from None


def batches_per_epoch(size: int, batch_size: int, even: bool) -> int:
    """Batches in one epoch; `even` drops a last, smaller batch (so every replica gets a share)."""
    return size // batch_size if even else math.ceil(size / batch_size)


def train_dataset(
    split: Split | ShardSplit,
    batch_size: int,
    seed: int,
    epochs: range,
    skip_batches: int = 0,
    limit_batches: int | None = None,
    even: bool = False,
) -> tf.data.Dataset:
    """The batches of `epochs` back to back, leaving out the first `skip_batches` of the first."""
    size = len(split)
    per_epoch = batches_per_epoch(size, batch_size, even)
    if limit_batches:
        per_epoch = min(per_epoch, limit_batches)
    if isinstance(split, ShardSplit):
        return _shard_epochs(split, batch_size, seed, epochs, skip_batches, per_epoch)
    x, y = tf.constant(split.x), tf.constant(split.y)

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
    split: Split | ShardSplit, batch_size: int, limit_batches: int | None = None
) -> tf.data.Dataset:
    """Every sample once, in order (the first `limit_batches` batches only, when set)."""
    if isinstance(split, ShardSplit):
        dataset = _shard_batches(split, batch_size, tf.constant(0, tf.int64), 0, False, 0)
    else:
        dataset = tf.data.Dataset.from_tensor_slices((split.x, split.y)).batch(batch_size)
    if limit_batches:
        dataset = dataset.take(limit_batches)
    return dataset.prefetch(tf.data.AUTOTUNE)


def _shard_batches(
    split: ShardSplit,
    batch_size: int,
    epoch: tf.Tensor,
    seed: int,
    shuffle: bool,
    skip_batches: tf.Tensor | int,
) -> tf.data.Dataset:
    """One epoch of a split's shards: `split.readers` generators (threads), taken in turn
    (batch i from reader i % readers): the order `ShardSplit.batches` gives any reader count."""
    readers = max(1, split.readers)
    signature = (
        tf.TensorSpec((None, *split.sample_shape), tf.float32),
        tf.TensorSpec((None,), tf.int64),
    )

    # Python generators inside: tf.data traces this once, AutoGraph has nothing to convert.
    @tf.autograph.experimental.do_not_convert
    def reader(worker: tf.Tensor) -> tf.data.Dataset:
        def generate(epoch_: int, worker_: int, skip_: int):  # type: ignore[no-untyped-def]
            yield from split.batches(
                batch_size,
                epoch=int(epoch_),
                seed=seed,
                shuffle=shuffle,
                worker=int(worker_),
                workers=readers,
                skip_batches=int(skip_),
            )

        return tf.data.Dataset.from_generator(
            generate, output_signature=signature, args=(epoch, worker, skip_batches)
        )

    return tf.data.Dataset.range(readers).interleave(
        reader,
        cycle_length=readers,
        block_length=1,
        num_parallel_calls=readers,
        deterministic=True,
    )


def _shard_epochs(
    split: ShardSplit,
    batch_size: int,
    seed: int,
    epochs: range,
    skip_batches: int,
    per_epoch: int,
) -> tf.data.Dataset:
    """`epochs` of shard batches back to back; the first without its first `skip_batches`."""

    @tf.autograph.experimental.do_not_convert
    def epoch_batches(epoch: tf.Tensor) -> tf.data.Dataset:
        skip = tf.where(epoch == epochs.start, tf.constant(skip_batches, tf.int64), 0)
        return _shard_batches(split, batch_size, epoch, seed, True, skip).take(per_epoch - skip)

    stream = tf.data.Dataset.range(epochs.start, epochs.stop).flat_map(epoch_batches)
    return stream.prefetch(tf.data.AUTOTUNE)
