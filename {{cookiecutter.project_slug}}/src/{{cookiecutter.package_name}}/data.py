"""Datasets as NumPy arrays, split into train/val/test with a fixed seed.

Framework-neutral on purpose: the training loop turns these arrays into its own loaders.
`source` is either `builtin:digits` (8x8 handwritten digits shipped in `datasets/`) or a path/URI
(`file://`, `s3://`, `gs://`, `az://` through fsspec) to a `.npz` with arrays `x` and `y`, or a
`.csv` whose last column is the integer label. Data larger than memory is prepared into shards
and streamed instead (`data=shards`, shards.py); `load` picks by the data config.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Union

import numpy as np

if TYPE_CHECKING:
    from .shards import ShardSplit

BUILTIN_PREFIX = "builtin:"
BUILTIN_DATASETS = ("digits",)
FILE_FORMATS = (".npz", ".csv")
# Which pip package gives fsspec each bucket scheme, for the error message when it is missing.
FSSPEC_BACKENDS = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}


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

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.train.sample_shape)


def load(data: Any) -> Splits:
    """The splits a data config names: prepared shards (`data=shards`) or arrays read whole."""
    s = getattr(data, "shards", None)  # absent from checkpoints made before shards existed
    if s is not None:
        from . import shards

        return shards.load_splits(
            data.source, s.shuffle_block, data.num_workers, s.cache_dir, s.cache_gb
        )
    return load_splits(data.source, data.val_fraction, data.test_fraction, data.split_seed)


def load_arrays(source: str) -> tuple[np.ndarray, np.ndarray]:
    """Read features and labels from a built-in dataset name or a path/URI."""
    if source.startswith(BUILTIN_PREFIX):
        return _load_builtin(source.removeprefix(BUILTIN_PREFIX))
    if not source.endswith(FILE_FORMATS):
        raise DataError(f"data source {source!r} must end with one of {FILE_FORMATS}")
    raw = _read_bytes(source)
    if source.endswith(".npz"):
        with np.load(io.BytesIO(raw)) as archive:
            if not {"x", "y"} <= set(archive.files):
                raise DataError(f"{source!r} must hold arrays 'x' and 'y', found {archive.files}")
            x, y = archive["x"], archive["y"]
    else:
        table = np.loadtxt(io.StringIO(raw.decode()), delimiter=",", ndmin=2)
        x, y = table[:, :-1], table[:, -1]
    if len(x) != len(y):
        raise DataError(f"{source!r}: {len(x)} samples but {len(y)} labels")
    return x.astype(np.float32), y.astype(np.int64)


def _load_builtin(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name not in BUILTIN_DATASETS:
        raise DataError(f"unknown built-in dataset {name!r}; choose from {BUILTIN_DATASETS}")
    path = resources.files(__package__) / "datasets" / f"{name}.npz"
    with path.open("rb") as handle, np.load(handle) as archive:
        x, y = archive["x"], archive["y"]
    # One channel first (N, 1, 8, 8), pixel counts 0..16 scaled to 0..1.
    return (x[:, None, :, :] / 16.0).astype(np.float32), y.astype(np.int64)


def _read_bytes(uri: str) -> bytes:
    import fsspec

    scheme = uri.split("://", 1)[0] if "://" in uri else "file"
    try:
        with fsspec.open(uri, "rb") as handle:
            return handle.read()
    except FileNotFoundError as err:
        raise DataError(f"data source not found: {uri!r}") from err
    except ImportError as err:
        package = FSSPEC_BACKENDS.get(scheme, "the fsspec backend for it")
        raise DataError(f"reading {uri!r} needs {package}: pip install {package}") from err
    except ValueError as err:  # fsspec: "Protocol not known"
        raise DataError(f"cannot read {uri!r}: {err}") from err


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


def split(
    x: np.ndarray, y: np.ndarray, val_fraction: float, test_fraction: float, seed: int
) -> Splits:
    """Stratified train/val/test split; the same seed always gives the same split."""
    for name, fraction in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not 0.0 < fraction < 1.0:
            raise DataError(f"data.{name} must be between 0 and 1, got {fraction}")
    if val_fraction + test_fraction >= 1.0:
        raise DataError("data.val_fraction + data.test_fraction must leave data to train on")
    train, val, test = stratified_parts(y, [val_fraction, test_fraction], seed)
    return Splits(
        train=Split(x[train], y[train]),
        val=Split(x[val], y[val]),
        test=Split(x[test], y[test]),
        num_classes=int(y.max()) + 1,
    )


def load_splits(source: str, val_fraction: float, test_fraction: float, split_seed: int) -> Splits:
    """Read a data source and split it; the entry point the training scripts use."""
    x, y = load_arrays(source)
    return split(x, y, val_fraction, test_fraction, split_seed)


def kfold_splits(
    source: str, folds: int, val_fraction: float, test_fraction: float, split_seed: int
) -> list[Splits]:
    """Stratified k-fold over train+val; the test split stays untouched.

    Fold i holds out the i-th part as its `test` and splits the rest into train and val, so every
    fold trains, early-stops and reports exactly like a normal run.
    """
    if folds < 2:
        raise DataError(f"data.folds must be at least 2, got {folds}")
    pool = load_splits(source, val_fraction, test_fraction, split_seed)
    assert isinstance(pool.train, Split) and isinstance(pool.val, Split)
    x = np.concatenate([pool.train.x, pool.val.x])
    y = np.concatenate([pool.train.y, pool.val.y])
    parts = stratified_parts(y, [1.0 / folds] * (folds - 1), split_seed)
    fold_splits = []
    for held_out in range(folds):
        keep = np.concatenate([part for i, part in enumerate(parts) if i != held_out])
        train, val = (keep[p] for p in stratified_parts(y[keep], [val_fraction], split_seed))
        test = parts[held_out]
        fold_splits.append(
            Splits(
                train=Split(x[train], y[train]),
                val=Split(x[val], y[val]),
                test=Split(x[test], y[test]),
                num_classes=pool.num_classes,
            )
        )
    return fold_splits
