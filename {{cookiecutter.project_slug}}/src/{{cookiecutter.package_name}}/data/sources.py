"""Where a run's data comes from: the built-in digits, a file, or a prepared dataset.

`data.source` is either `builtin:digits` (8x8 handwritten digits shipped in `datasets/`) or a
path/URI (uris.py) to a `.npz` with arrays `x` and `y`, or a `.csv` (tables.py: a header, a
label column, text columns, missing cells; preparation.py fits their preparation on the training
split); both are read whole and split (splits.py). Data larger than memory
is prepared into shards and streamed instead (`data=shards`, shards/); `load` picks by the data
config.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
from importlib import resources
from typing import Any

import numpy as np

from . import summary
from .preparation import Options, Preparation, fit
from .splits import DataError, Split, Splits, split, split_indices, stratified_parts
from .tables import RawTable, Table, read_csv
from .uris import is_local, local_path, read_bytes

log = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"
BUILTIN_DATASETS = ("digits",)
FILE_FORMATS = (".npz", ".csv")


def load(data: Any, preparation: Preparation | None = None) -> Splits:
    """The splits a data config names: prepared shards (`data=shards`) or arrays read whole (a
    table prepared by `preparation`, a run's saved one, or one fitted on its training split)."""
    s = getattr(data, "shards", None)  # absent from checkpoints made before shards existed
    if s is not None:
        from .shards import stream

        return stream.load_splits(
            data.source, s.shuffle_block, readers(data.num_workers), s.cache_dir, s.cache_gb
        )
    return load_splits(
        data.source, data.val_fraction, data.test_fraction, data.split_seed,
        preparation=preparation, **table_options(data),
    )  # fmt: skip


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
    """A data config's `label`, `header` and preparation choices, for a .csv (absent from
    configs made before them: what those runs did)."""
    return {"label": getattr(data, "label", None), "header": getattr(data, "header", None),
            "options": Options.of(data)}  # fmt: skip


def load_table(
    source: str,
    label: str | int | None = None,
    header: bool | None = None,
    options: Options | None = None,
    fractions: tuple[float, float, int] | None = None,
    preparation: Preparation | None = None,
) -> Table:
    """Features, labels and class names from a built-in dataset name or a path/URI. A .csv is
    prepared by `preparation`, or by one fitted on the training split that `fractions` (val,
    test, seed) make (on every row without them)."""
    if source.startswith(BUILTIN_PREFIX):
        x, y = _load_builtin(source.removeprefix(BUILTIN_PREFIX))
        return Table(x, y, [str(c) for c in range(int(y.max()) + 1)])
    if is_local(source) and local_path(source).is_dir():
        raise DataError(
            f"{source} is a folder: make shards of it with `invoke data.prepare {source} DEST`, "
            "then train with data=shards data.source=DEST"
        )
    if not source.endswith(FILE_FORMATS):
        raise DataError(f"data source {source!r} must end with one of {FILE_FORMATS}")
    raw = read_bytes(source)
    if source.endswith(".csv"):
        table = read_csv(raw, source, label, header, options)
        if preparation is None:
            rows = split_indices(table.y, *fractions)[0] if fractions else np.arange(len(table.y))
            preparation = fit_table(table, rows, options or Options())
        else:
            table = _as_trained(table, preparation)
        x = preparation.transform(table.values)
        return Table(x, table.y, preparation.classes, preparation.columns, table, preparation)
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


def fit_table(table: RawTable, rows: np.ndarray, options: Options) -> Preparation:
    return fit(table.names, table.values, rows, options, table.label, table.classes)


def _as_trained(table: RawTable, preparation: Preparation) -> RawTable:
    """A file read for a trained model: its columns and labels must be the model's."""
    if table.names != preparation.names:
        raise DataError(f"{table.source}: columns {', '.join(table.names)}; the model was trained "
                        f"on {', '.join(preparation.names)}")  # fmt: skip
    for name, values, column in zip(table.names, table.values, preparation.columns, strict=True):
        if isinstance(values, np.ndarray) != (column["kind"] == "number"):
            kind = "numbers" if column["kind"] == "number" else "texts"
            raise DataError(f"{table.source}: column {name}: the model was trained on {kind}")
    unknown = sorted(set(table.classes) - set(preparation.classes))
    if unknown:
        raise DataError(f"{table.source}: label {unknown[0]!r} is no class of the model's: "
                        f"{', '.join(preparation.classes)}")  # fmt: skip
    codes = np.array([preparation.classes.index(name) for name in table.classes])
    return dataclasses.replace(table, y=codes[table.y], classes=preparation.classes)


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
    options: Options | None = None,
    preparation: Preparation | None = None,
) -> Splits:
    """Read a data source and split it; the entry point the training scripts use."""
    fractions = (val_fraction, test_fraction, split_seed)
    table = load_table(source, label, header, options, fractions, preparation)
    splits = split(table.x, table.y, *fractions)
    if table.raw is None or table.preparation is None:
        return splits
    sizes = {name: len(getattr(splits, name)) for name in ("train", "val", "test")}
    summary.log_summary(table.raw, table.preparation, sizes)
    return dataclasses.replace(
        splits, num_classes=len(table.classes), preparation=table.preparation
    )


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
    fold trains, early-stops and reports exactly like a normal run; a table's preparation is
    fitted on each fold's own train part.
    """
    if folds < 2:
        raise DataError(f"data.folds must be at least 2, got {folds}")
    table = load_table(source, options.get("label"), options.get("header"), options.get("options"))
    pool_train, pool_val, untouched = split_indices(
        table.y, val_fraction, test_fraction, split_seed
    )
    pool = np.concatenate([pool_train, pool_val])
    if table.raw is not None and table.preparation is not None:
        sizes = {"folds over": len(pool), "test (untouched)": len(untouched)}
        summary.log_summary(table.raw, table.preparation, sizes)
    y = table.y[pool]
    parts = stratified_parts(y, [1.0 / folds] * (folds - 1), split_seed)
    fold_splits = []
    for held_out in range(folds):
        keep = np.concatenate([part for i, part in enumerate(parts) if i != held_out])
        train, val = (keep[p] for p in stratified_parts(y[keep], [val_fraction], split_seed))
        test = parts[held_out]
        preparation, x = table.preparation, table.x[pool]
        if table.raw is not None:
            preparation = fit_table(table.raw, pool[train], options.get("options") or Options())
            x = preparation.transform(table.raw.values)[pool]
        fold_splits.append(
            Splits(
                train=Split(x[train], y[train]),
                val=Split(x[val], y[val]),
                test=Split(x[test], y[test]),
                num_classes=len(table.classes),
                preparation=preparation,
            )
        )
    return fold_splits
