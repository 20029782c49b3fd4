"""Batches from in-memory arrays: shuffled per epoch, sharded across DDP ranks, resumable mid-epoch.

The order of epoch `e` depends only on `seed + e`, so a run resumed halfway through an epoch skips
exactly the batches it already trained on and sees the rest in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import BatchSampler, DataLoader, Sampler, TensorDataset

from .data import Split


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


def make_loader(
    split: Split,
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


def epoch_sampler(loader: DataLoader) -> EpochSampler:
    """The EpochSampler inside a loader from make_loader (under its BatchSampler)."""
    sampler = loader.sampler.sampler  # type: ignore[attr-defined]
    assert isinstance(sampler, EpochSampler)
    return sampler
