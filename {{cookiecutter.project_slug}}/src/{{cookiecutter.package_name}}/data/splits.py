"""A dataset in memory as train/val/test arrays, split by class with a fixed seed.

Framework-neutral on purpose: the training loop turns these arrays into its own loaders.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    from .shards.stream import ShardSplit


class DataError(ValueError):
    """The data source is missing, unreadable or has the wrong shape."""


@dataclass(frozen=True)
class Split:
    """Features `x` (float32, shape N x sample shape) and integer labels `y`."""

    x: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return len(self.y)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])


# In memory, or streamed from shards: the loaders and scorers take either. Union[] with names in
# quotes, because ShardSplit imports this module and `type X = ...` needs Python 3.12.
AnySplit = Union["Split", "ShardSplit"]


@dataclass(frozen=True)
class Splits:
    train: AnySplit
    val: AnySplit
    test: AnySplit
    num_classes: int
    preparation: Any = None  # a table's fitted Preparation (preparation.py), saved with the run

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.sample_shape)


def stratified_parts(y: np.ndarray, fractions: list[float], seed: int) -> list[np.ndarray]:
    """Indices for parts of the given sizes (the rest goes first), each class split alike."""
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[] for _ in range(len(fractions) + 1)]
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        bounds = np.cumsum([round(f * len(members)) for f in fractions])
        pieces = np.split(members, bounds)
        # np.split puts the fractions first and the remainder last; the remainder is part 0.
        for part, piece in zip(parts, [pieces[-1], *pieces[:-1]], strict=True):
            part.append(piece)
    return [rng.permutation(np.concatenate(part)) for part in parts]


def split_indices(
    y: np.ndarray, val_fraction: float, test_fraction: float, seed: int
) -> list[np.ndarray]:
    """The train, val and test indices of a stratified split; the same seed, the same split."""
    for name, fraction in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < fraction < 1.0:
            raise DataError(f"data.{name} must be between 0 and 1, got {fraction}")
    if val_fraction + test_fraction >= 1.0:
        raise DataError("data.val_fraction + data.test_fraction must leave data to train on")
    return stratified_parts(y, [val_fraction, test_fraction], seed)


def split(
    x: np.ndarray, y: np.ndarray, val_fraction: float, test_fraction: float, seed: int
) -> Splits:
    """Stratified train/val/test split; the same seed always gives the same split."""
    train, val, test = split_indices(y, val_fraction, test_fraction, seed)
    return Splits(
        train=Split(x[train], y[train]),
        val=Split(x[val], y[val]),
        test=Split(x[test], y[test]),
        num_classes=int(y.max()) + 1,
    )
