"""tf.data over shards, with reading threads: it hands out the epoch's order (that of
data/shards/stream.py), a resume goes on from the next batch, and evaluation reads every sample
once."""

from __future__ import annotations

from pathlib import Path

from helpers.datasets import numbered_shards, numbers

from {{ cookiecutter.package_name }}.data.batches import eval_dataset, train_dataset
from {{ cookiecutter.package_name }}.data.shards.stream import ShardSplit, load_splits


def test_readers_hand_out_the_epochs_order_and_a_resume_goes_on_from_the_next_batch(
    tmp_path: Path,
) -> None:
    root = numbered_shards(tmp_path)
    splits = load_splits(str(root), 2, 3, str(tmp_path / "cache"), 1.0)
    train = splits.train
    assert isinstance(train, ShardSplit)
    per_epoch = -(-len(train) // 4)
    epoch = {e: numbers(train.batches(4, epoch=e, seed=5, shuffle=True)) for e in (3, 4)}
    stream = train_dataset(train, 4, 5, range(3, 5), skip_batches=5)
    got = numbers(stream.as_numpy_iterator())
    assert got == epoch[3][5 * 4 :] + epoch[4]
    assert len(got) == len(train) * 2 - 5 * 4 and per_epoch * 4 >= len(train)
    scored = numbers(eval_dataset(splits.val, 4).as_numpy_iterator())
    assert scored == numbers(splits.val.batches(4))  # type: ignore[union-attr]
    assert len(scored) == len(set(scored)) == len(splits.val)
