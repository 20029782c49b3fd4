"""Shards for `data=shards`: `python -m PACKAGE.prepare SRC DEST` (`invoke data.prepare`).

SRC is a `.npz` (arrays x, y) or a `.csv` (last column the label), read whole as data.py reads
them, or a folder of images with one sub-folder per class, read one image at a time (so it may be
far larger than memory). The split is data.py's stratified, seeded split: `data=shards` on the
shards of a file trains on the same samples as `data=files` on the file. DEST is a folder or an
s3://, gs://, az:// prefix; index.json (shards.py describes it) is written last, so a DEST
without one is not a dataset, and a failure removes what it wrote.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import shards
from .data import DataError, load_arrays, stratified_parts
from .shards import FORMAT, INDEX, SPLITS, VERSION, Layout, Shard

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
DEFAULT_SHARD_MB = 64  # a few seconds of a bucket's bandwidth; small enough to shuffle well


@dataclass(frozen=True)
class Source:
    """Samples of a dataset: its layout and labels up front, its features one by one."""

    layout: Layout
    labels: np.ndarray
    classes: list[str]
    features: Any  # features(i) -> the i-th sample as an array of the layout


def arrays_source(path: str) -> Source:
    x, y = load_arrays(path)
    classes = [str(c) for c in range(int(y.max()) + 1)] if len(y) else []
    return Source(Layout(tuple(x.shape[1:]), "float32"), y, classes, lambda i: x[i])


def images_source(folder: Path, size: tuple[int, int] | None) -> Source:
    """One sub-folder per class (sorted names are the labels 0, 1, ...), images inside."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading images needs Pillow: pip install pillow") from None
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    files = [
        (path, label)
        for label, name in enumerate(classes)
        for path in sorted((folder / name).iterdir())
        if path.suffix.lower() in IMAGE_SUFFIXES
    ]
    if not files:
        raise DataError(
            f"{folder}: no images in sub-folders (one per class; {', '.join(IMAGE_SUFFIXES)})"
        )
    with Image.open(files[0][0]) as first:
        width, height = size or first.size

    def features(i: int) -> np.ndarray:
        path = files[i][0]
        with Image.open(path) as image:
            rgb = image.convert("RGB")
            if rgb.size != (width, height):
                if size is None:
                    raise DataError(
                        f"{path} is {rgb.size[0]}x{rgb.size[1]}, the first image "
                        f"{width}x{height}: give --image-size WxH to resize them all"
                    )
                rgb = rgb.resize((width, height))
            return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1)  # channels first

    labels = np.array([label for _, label in files], dtype=np.int64)
    return Source(Layout((3, height, width), "uint8", 1 / 255), labels, classes, features)


def open_source(src: str, image_size: tuple[int, int] | None) -> Source:
    if shards.is_local(src) and shards.local_path(src).is_dir():
        return images_source(shards.local_path(src), image_size)
    if not src.endswith((".npz", ".csv")):
        raise DataError(f"{src!r}: give a .npz, a .csv or a folder of images (one per class)")
    return arrays_source(src)


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
        sha256=shards.sha256_of(path),
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
) -> dict[str, Any]:
    """Write the shards and index of `src` to `dest`; returns the index."""
    _refuse_existing(dest)
    source = open_source(src, image_size)
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
            "splits": listed,
        }  # fmt: skip
        (staging / INDEX).write_text(json.dumps(index, indent=1), encoding="utf-8")
        _publish(staging, dest)
        return index
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refuse_existing(dest: str) -> None:
    if shards.is_local(dest):
        path = shards.local_path(dest)
        if path.exists() and any(path.iterdir()):
            raise DataError(f"{dest} exists and is not empty: choose another DEST or remove it")
        return
    fs, root = _filesystem(dest)
    if fs.exists(f"{root}/{INDEX}"):
        raise DataError(f"{dest} already holds a prepared dataset: choose another DEST")


def _staging_parent(dest: str) -> str | None:
    """Next to a local DEST (the final rename stays on one disk); a temporary folder otherwise."""
    if not shards.is_local(dest):
        return None
    parent = shards.local_path(dest).resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    return str(parent)


def _filesystem(uri: str) -> tuple[Any, str]:
    from fsspec.core import url_to_fs

    try:
        return url_to_fs(uri)
    except ImportError as err:
        package = shards.FSSPEC_BACKENDS.get(uri.split("://", 1)[0], "the fsspec backend for it")
        raise DataError(f"writing {uri!r} needs {package}: pip install {package}") from err


def _publish(staging: Path, dest: str) -> None:
    """Move the finished shards to DEST, index.json last; on a failure, remove what went up."""
    if shards.is_local(dest):
        path = shards.local_path(dest)
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


def main(argv: list[str] | None = None) -> None:
    from omegaconf import OmegaConf

    # The split every data config starts from (configs/ sits next to src/, as jobs.py expects).
    defaults = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs/data/_defaults.yaml")
    parser = argparse.ArgumentParser(prog="prepare", description=__doc__.splitlines()[0])
    parser.add_argument("src")
    parser.add_argument("dest")
    parser.add_argument("--shard-size", type=float, default=DEFAULT_SHARD_MB, metavar="MB")
    parser.add_argument("--image-size", default="", metavar="WxH")
    parser.add_argument("--val-fraction", type=float, default=defaults.val_fraction)
    parser.add_argument("--test-fraction", type=float, default=defaults.test_fraction)
    parser.add_argument("--split-seed", type=int, default=defaults.split_seed)
    args = parser.parse_args(argv)
    try:
        size = _image_size(args.image_size)
        if args.shard_size <= 0:
            raise DataError(f"--shard-size {args.shard_size:g}: give a size in MB above 0")
        for flag, value in (("--val-fraction", args.val_fraction),
                            ("--test-fraction", args.test_fraction)):  # fmt: skip
            if not 0 < value < 1:
                raise DataError(f"{flag} {value:g}: give a fraction between 0 and 1")
        index = prepare(
            args.src,
            args.dest,
            shard_mb=args.shard_size,
            val_fraction=args.val_fraction,
            test_fraction=args.test_fraction,
            split_seed=args.split_seed,
            image_size=size,
        )
    except (DataError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    counts = {name: sum(s["rows"] for s in index["splits"][name]) for name in SPLITS}
    total = sum(len(index["splits"][name]) for name in SPLITS)
    print(
        f"prepared {args.dest}: {total} shards, "
        + ", ".join(f"{counts[name]} {name}" for name in SPLITS)
        + f", samples {'x'.join(map(str, index['layout']['shape']))} {index['layout']['dtype']}"
    )
    print(f"train on it: invoke train -- data=shards data.source={args.dest}")


def _image_size(text: str) -> tuple[int, int] | None:
    if not text:
        return None
    width, _, height = text.lower().partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise DataError(f"--image-size {text!r}: give WIDTHxHEIGHT in pixels, as 224x224")
    return int(width), int(height)


if __name__ == "__main__":
    main()
