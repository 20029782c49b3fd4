"""PyTorch's DataLoader over shards, with worker processes: it hands out the epoch's order
(data/shards/stream.py's), two DDP ranks split it without overlap, and a resume goes on from the
next batch."""

from __future__ import annotations

from pathlib import Path

from helpers.datasets import numbered_shards, numbers

from {{ cookiecutter.package_name }}.data.batches import epoch_sampler, make_loader
from {{ cookiecutter.package_name }}.data.shards.stream import ShardSplit, load_splits


def test_two_workers_hand_out_the_epochs_order_and_two_ranks_split_it(tmp_path: Path) -> None:
    root = numbered_shards(tmp_path)
    split = load_splits(str(root), 2, 2, str(tmp_path / "cache"), 1.0).train
    assert isinstance(split, ShardSplit)
    seen = []
    for rank in (0, 1):
        loader = make_loader(split, 4, shuffle=True, seed=5, rank=rank, world_size=2)
        expected = numbers(
            split.batches(4, epoch=3, seed=5, shuffle=True, rank=rank, world=2, even=True)
        )
        epoch_sampler(loader).set_epoch(3)
        got = numbers(loader)
        assert got == expected
        epoch_sampler(loader).set_epoch(3, skip=5 * 4)  # five batches done
        assert numbers(loader) == expected[5 * 4 :]
        seen += got
    assert len(seen) == len(set(seen)) == len(split) // 2 * 2
