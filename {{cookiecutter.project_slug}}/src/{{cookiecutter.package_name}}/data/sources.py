"""Where a run's data comes from: the built-in digits, a file, or a prepared dataset.

`data.source` is either `builtin:digits` (8x8 handwritten digits shipped in `datasets/`) or a
path/URI (uris.py) to a `.npz` with arrays `x` and `y`, or a `.csv` (tables.py: a header, a
label column, text columns); both are read whole and split (splits.py). Data larger than memory
is prepared into shards and streamed instead (`data=shards`, shards/); `load` picks by the data
config.
"""

from __future__ import annotations

import io
import os
from importlib import resources
from typing import Any

import numpy as np

from .splits import DataError, Split, Splits, split, stratified_parts
from .tables import Table, read_csv
from .uris import read_bytes

BUILTIN_PREFIX = "builtin:"
BUILTIN_DATASETS = ("digits",)
FILE_FORMATS = (".npz", ".csv")


def load(data: Any) -> Splits:
    """The splits a data config names: prepared shards (`data=shards`) or arrays read whole."""
    s = getattr(data, "shards", None)  # absent from checkpoints made before shards existed
    if s is not None:
        from .shards import stream

        return stream.load_splits(
            data.source, s.shuffle_block, readers(data.num_workers), s.cache_dir, s.cache_gb
        )
    return load_splits(
        data.source, data.val_fraction, data.test_fraction, data.split_seed, **table_options(data)
    )


def readers(num_workers: int | str) -> int:
    """`data.num_workers` as a number: `auto` gives each training process of this machine its
    share of the cores this process may use, less one for the process itself, at most 16
    (`benchmarks/shard_readers.py` measures what one reader delivers)."""
    if num_workers != "auto":
        return int(num_workers)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))  # the launcher's, per machine
    return max(1, min(16, (cores or 1) // max(processes, 1) - 1))


def table_options(data: Any) -> dict[str, Any]:
    """A data config's `label` and `header`, for a .csv (absent from configs made before)."""
    return {"label": getattr(data, "label", None), "header": getattr(data, "header", None)}


def load_table(source: str, label: str | int | None = None, header: bool | None = None) -> Table:
    """Features, labels and class names from a built-in dataset name or a path/URI."""
    if source.startswith(BUILTIN_PREFIX):
        x, y = _load_builtin(source.removeprefix(BUILTIN_PREFIX))
        return Table(x, y, [str(c) for c in range(int(y.max()) + 1)])
    if not source.endswith(FILE_FORMATS):
        raise DataError(f"data source {source!r} must end with one of {FILE_FORMATS}")
    raw = read_bytes(source)
    if source.endswith(".csv"):
        return read_csv(raw, source, label, header)
    with np.load(io.BytesIO(raw)) as archive:
        if not {"x", "y"} <= set(archive.files):
            raise DataError(f"{source!r} must hold arrays 'x' and 'y', found {archive.files}")
        x, y = archive["x"], archive["y"]
    if len(x) != len(y):
        raise DataError(f"{source!r}: {len(x)} samples but {len(y)} labels")
    if len(y) == 0:
        raise DataError(f"{source!r}: no samples")
    y = y.astype(np.int64)
    return Table(x.astype(np.float32), y, [str(c) for c in range(int(y.max()) + 1)])


def load_arrays(
    source: str, label: str | int | None = None, header: bool | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Read features and labels from a built-in dataset name or a path/URI."""
    table = load_table(source, label, header)
    return table.x, table.y


def _load_builtin(name: str) -> tuple[np.ndarray, np.ndarray]:
    if name not in BUILTIN_DATASETS:
        raise DataError(f"unknown built-in dataset {name!r}; choose from {BUILTIN_DATASETS}")
    path = resources.files(__package__) / "datasets" / f"{name}.npz"
    with path.open("rb") as handle, np.load(handle) as archive:
        x, y = archive["x"], archive["y"]
    # One channel first (N, 1, 8, 8), pixel counts 0..16 scaled to 0..1.
    return (x[:, None, :, :] / 16.0).astype(np.float32), y.astype(np.int64)


def load_splits(
    source: str,
    val_fraction: float,
    test_fraction: float,
    split_seed: int,
    label: str | int | None = None,
    header: bool | None = None,
) -> Splits:
    """Read a data source and split it; the entry point the training scripts use."""
    x, y = load_arrays(source, label, header)
    return split(x, y, val_fraction, test_fraction, split_seed)


def kfold_splits(
    source: str,
    folds: int,
    val_fraction: float,
    test_fraction: float,
    split_seed: int,
    **options: Any,
) -> list[Splits]:
    """Stratified k-fold over train+val; the test split stays untouched.

    Fold i holds out the i-th part as its `test` and splits the rest into train and val, so every
    fold trains, early-stops and reports exactly like a normal run.
    """
    if folds < 2:
        raise DataError(f"data.folds must be at least 2, got {folds}")
    pool = load_splits(source, val_fraction, test_fraction, split_seed, **options)
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
