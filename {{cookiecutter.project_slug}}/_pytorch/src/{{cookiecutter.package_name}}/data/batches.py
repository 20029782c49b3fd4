"""Batches from in-memory arrays or streamed shards: shuffled per epoch, split across DDP ranks,
resumable mid-epoch.

The order of epoch `e` depends only on the seed and `e`, so a run resumed halfway through an
epoch skips exactly the batches it already trained on and sees the rest in the same order.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from functools import partial
from typing import Protocol

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    Sampler,
    TensorDataset,
    get_worker_info,
)

from .shards.stream import ShardSplit
from .splits import Split, Splits


class EpochOrder(Protocol):
    """What the loop asks of a loader's order: where an epoch starts, how long it is."""

    def set_epoch(self, epoch: int, skip: int = 0) -> None: ...

    @property
    def per_rank(self) -> int: ...


class EpochSampler(Sampler[int]):
    """Sample indices for one rank: shuffled with `seed + epoch`, optionally skipping a prefix."""

    def __init__(
        self,
        size: int,
        shuffle: bool,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        even: bool = True,
    ) -> None:
        self.size, self.shuffle, self.seed = size, shuffle, seed
        self.rank, self.world_size, self.even = rank, world_size, even
        self.epoch, self.skip = 0, 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Start epoch `epoch`, leaving out its first `skip` samples of this rank."""
        self.epoch, self.skip = epoch, skip

    def _indices(self) -> torch.Tensor:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator)
        else:
            order = torch.arange(self.size)
        if self.even:
            # In training every rank must take the same number of steps: drop the uneven tail.
            order = order[: self.per_rank * self.world_size]
        return order[self.rank :: self.world_size]

    @property
    def per_rank(self) -> int:
        """Samples this rank sees in one epoch."""
        if self.even:
            return self.size // self.world_size
        return len(range(self.rank, self.size, self.world_size))

    def __iter__(self) -> Iterator[int]:
        return iter(self._indices()[self.skip :].tolist())

    def __len__(self) -> int:
        return max(0, self.per_rank - self.skip)


class ShardStream(IterableDataset):
    """A split's shards as batches (data/shards/stream.py orders them); each loader worker makes
    its own."""

    def __init__(
        self,
        split: ShardSplit,
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        even: bool = True,
    ) -> None:
        self.split, self.batch_size, self.shuffle, self.seed = split, batch_size, shuffle, seed
        self.rank, self.world_size, self.even = rank, world_size, even
        # The epoch and the samples to skip, in shared memory: the loader's worker processes
        # stay up from epoch to epoch and read them here when the next epoch starts.
        self._position = multiprocessing.RawArray("q", 2)

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        """Start epoch `epoch`, without its first `skip` samples of this rank (whole batches)."""
        self._position[0], self._position[1] = epoch, skip

    @property
    def per_rank(self) -> int:
        from .shards.stream import rank_range

        low, high = rank_range(len(self.split), self.rank, self.world_size, self.even)
        return high - low

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        epoch, skip = self._position
        batches = self.split.batches(
            self.batch_size,
            epoch=epoch,
            seed=self.seed,
            shuffle=self.shuffle,
            rank=self.rank,
            world=self.world_size,
            even=self.even,
            worker=worker,
            workers=workers,
            skip_batches=skip // self.batch_size,
        )
        for x, y in batches:
            yield torch.from_numpy(x), torch.from_numpy(y)


def make_loader(
    split: Split | ShardSplit,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    even: bool = True,
    num_workers: int = 0,
    pin_memory: bool = False,
) -> DataLoader:
    """A loader that fetches whole batches by index (fast for in-memory tensors).

    `even=False` gives every sample to exactly one rank, for evaluation where ranks may differ.
    """
    if isinstance(split, ShardSplit):
        stream = ShardStream(split, batch_size, shuffle, seed, rank, world_size, even)
        return DataLoader(
            stream,
            batch_size=None,  # the stream yields whole batches
            num_workers=split.readers,  # data.num_workers, evaluation's loaders too
            pin_memory=pin_memory,
            persistent_workers=split.readers > 0,
            prefetch_factor=4 if split.readers else None,
            # Its own generator, as below: starting workers must not draw from the global RNG.
            generator=torch.Generator().manual_seed(seed),
        )
    dataset = TensorDataset(torch.from_numpy(split.x), torch.from_numpy(split.y))
    sampler = EpochSampler(len(split), shuffle, seed, rank, world_size, even)
    return DataLoader(
        dataset,
        sampler=BatchSampler(sampler, batch_size, drop_last=False),
        batch_size=None,  # the sampler already yields batches of indices
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=num_workers > 0,
        # Its own generator: iterating must not draw from the global RNG (that would shift
        # dropout masks after a mid-epoch resume).
        generator=torch.Generator().manual_seed(seed),
    )


def run_loaders(
    splits: Splits,
    batch_size: int,
    seed: int,
    rank: int,
    world_size: int,
    num_workers: int,
    pin_memory: bool,
) -> tuple[DataLoader, DataLoader]:
    """A run's two loaders, made once (streamed shards' workers start once, not every epoch):
    training, shuffled, the same number of batches on every rank; validation, in order, every
    sample on exactly one rank."""
    loader = partial(
        make_loader, batch_size=batch_size, seed=seed, rank=rank, world_size=world_size,
        num_workers=num_workers, pin_memory=pin_memory,
    )  # fmt: skip
    return loader(splits.train, shuffle=True), loader(splits.val, shuffle=False, even=False)


def epoch_sampler(loader: DataLoader) -> EpochOrder:
    """The order of a loader from make_loader: its stream, or the EpochSampler under its
    BatchSampler."""
    if isinstance(loader.dataset, ShardStream):
        return loader.dataset
    sampler = loader.sampler.sampler  # type: ignore[attr-defined]
    assert isinstance(sampler, EpochSampler)
    return sampler
