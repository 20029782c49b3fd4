"""Shards and their index written for a dataset: the split is splits.py's stratified, seeded
split, so `data=shards` on the shards of a file trains on the same samples as `data=files` on
the file. DEST is a folder or an s3://, gs://, az:// prefix; index.json is written last, so a
DEST without one is not a dataset, and a failure removes what it wrote."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ..preparation import Options
from ..splits import DataError, stratified_parts
from ..uris import FSSPEC_BACKENDS, is_local, local_path
from .cache import sha256_of
from .index import FORMAT, INDEX, SPLITS, VERSION, Layout, Shard
from .samples import Source, open_source

DEFAULT_SHARD_MB = 64  # a few seconds of a bucket's bandwidth; small enough to shuffle well


def write_shard(rows: list[tuple[np.ndarray, int]], layout: Layout, path: Path) -> Shard:
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = pa.array(
        [np.ascontiguousarray(f, dtype=layout.dtype).tobytes() for f, _ in rows],
        type=pa.binary(layout.sample_bytes),
    )
    y = pa.array([label for _, label in rows], type=pa.int64())
    path.parent.mkdir(parents=True, exist_ok=True)
    # One row group: a reader takes whole shards. Uncompressed: pixels and floats barely shrink,
    # and decompressing would cost the loader more than the bytes save.
    pq.write_table(pa.table({"x": x, "y": y}), path, compression="none", row_group_size=len(rows))
    return Shard(
        file=f"{path.parent.name}/{path.name}",
        rows=len(rows),
        bytes=path.stat().st_size,
        sha256=sha256_of(path),
    )


def split_shards(
    source: Source, order: np.ndarray, split: str, rows_per_shard: int, staging: Path
) -> Iterator[Shard]:
    """Shards of one split, in the split's (seeded, shuffled) order, written one at a time."""
    for number, start in enumerate(range(0, len(order), rows_per_shard)):
        chunk = order[start : start + rows_per_shard]
        rows = [(source.features(int(i)), int(source.labels[i])) for i in chunk]
        yield write_shard(rows, source.layout, staging / split / f"{number:05d}.parquet")


def prepare(
    src: str,
    dest: str,
    *,
    shard_mb: float = DEFAULT_SHARD_MB,
    val_fraction: float,
    test_fraction: float,
    split_seed: int,
    image_size: tuple[int, int] | None = None,
    label: str | None = None,
    header: bool | None = None,
    options: Options | None = None,
) -> dict[str, Any]:
    """Write the shards and index of `src` to `dest`; returns the index (under `skipped`, the
    files of an image folder it left out)."""
    _refuse_existing(dest)
    fractions = (val_fraction, test_fraction, split_seed)
    source = open_source(src, image_size, label, header, options, fractions)
    if len(source.labels) < 3:
        raise DataError(f"{src}: {len(source.labels)} samples; a split needs at least 3")
    train, val, test = stratified_parts(source.labels, [val_fraction, test_fraction], split_seed)
    rows_per_shard = max(1, int(shard_mb * 1e6) // source.layout.sample_bytes)
    staging = Path(tempfile.mkdtemp(prefix=".prepare-", dir=_staging_parent(dest)))
    try:
        listed = {
            name: [asdict(s) for s in split_shards(source, order, name, rows_per_shard, staging)]
            for name, order in zip(SPLITS, (train, val, test), strict=True)
        }
        index = {
            "format": FORMAT,
            "version": VERSION,
            "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "source": src,
            "split": {"val_fraction": val_fraction, "test_fraction": test_fraction,
                      "split_seed": split_seed},
            "layout": {**asdict(source.layout), "shape": list(source.layout.shape)},
            "num_classes": len(source.classes),
            "classes": source.classes,
            **({"columns": source.columns} if source.columns else {}),  # a .csv's encoding
            # A .csv's fitted preparation, which a run on the shards saves as its own.
            **({"preparation": source.preparation.to_dict()} if source.preparation else {}),
            **({"summary": source.summary} if source.summary else {}),
            **({"skipped": source.skipped} if source.skipped else {}),  # an image folder's
            "splits": listed,
        }  # fmt: skip
        (staging / INDEX).write_text(json.dumps(index, indent=1), encoding="utf-8")
        _publish(staging, dest)
        return index
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refuse_existing(dest: str) -> None:
    if is_local(dest):
        path = local_path(dest)
        if path.exists() and any(path.iterdir()):
            raise DataError(f"{dest} exists and is not empty: choose another DEST or remove it")
        return
    fs, root = _filesystem(dest)
    if fs.exists(f"{root}/{INDEX}"):
        raise DataError(f"{dest} already holds a prepared dataset: choose another DEST")


def _staging_parent(dest: str) -> str | None:
    """Next to a local DEST (the final rename stays on one disk); a temporary folder otherwise."""
    if not is_local(dest):
        return None
    parent = local_path(dest).resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    return str(parent)


def _filesystem(uri: str) -> tuple[Any, str]:
    from fsspec.core import url_to_fs

    try:
        return url_to_fs(uri)
    except ImportError as err:
        package = FSSPEC_BACKENDS.get(uri.split("://", 1)[0], "the fsspec backend for it")
        raise DataError(f"writing {uri!r} needs {package}: pip install {package}") from err


def _publish(staging: Path, dest: str) -> None:
    """Move the finished shards to DEST, index.json last; on a failure, remove what went up."""
    if is_local(dest):
        path = local_path(dest)
        if path.exists():
            path.rmdir()  # empty: _refuse_existing checked
        os.replace(staging, path)
        return
    fs, root = _filesystem(dest)
    files = sorted(p for p in staging.rglob("*.parquet"))
    sent: list[str] = []
    try:
        for path in [*files, staging / INDEX]:
            target = f"{root}/{path.relative_to(staging).as_posix()}"
            fs.put_file(str(path), target)
            sent.append(target)
    except BaseException:
        for target in sent:
            with contextlib.suppress(OSError):
                fs.rm_file(target)
        raise
