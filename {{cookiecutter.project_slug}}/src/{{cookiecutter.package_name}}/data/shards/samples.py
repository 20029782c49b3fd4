"""What `invoke data.prepare` reads: the arrays of a `.npz` or `.csv` (read whole, as a run reads
them), or a folder of images with one sub-folder per class (read one image at a time, so it may
be far larger than memory)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..preparation import Options, Preparation
from ..sources import load_table
from ..splits import DataError
from ..summary import lines
from ..uris import is_local, local_path
from .index import Layout

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")


@dataclass(frozen=True)
class Source:
    """Samples of a dataset: its layout and labels up front, its features one by one."""

    layout: Layout
    labels: np.ndarray
    classes: list[str]
    features: Any  # features(i) -> the i-th sample as an array of the layout
    columns: list[dict] = field(default_factory=list)  # a .csv's columns, and their encoding
    preparation: Preparation | None = None  # a .csv's, fitted on the train split
    summary: list[str] = field(default_factory=list)  # a .csv's (data/summary.py)
    skipped: list[str] = field(default_factory=list)  # files of an image folder left out


def arrays_source(
    path: str,
    label: str | None = None,
    header: bool | None = None,
    options: Options | None = None,
    fractions: tuple[float, float, int] | None = None,
) -> Source:
    """A .npz's or a .csv's rows (a .csv prepared as a run would: fitted on the train split
    that `fractions` make)."""
    table = load_table(path, label, header, options, fractions)
    x = table.x
    layout = Layout(tuple(x.shape[1:]), "float32")
    said: list[str] = []
    if table.raw is not None and table.preparation is not None and fractions:
        from ..splits import split_indices

        parts = split_indices(table.y, *fractions)
        sizes = dict(zip(("train", "val", "test"), map(len, parts), strict=True))
        said = lines(table.raw, table.preparation, sizes)
    return Source(layout, table.y, table.classes, lambda i: x[i], table.columns,
                  table.preparation, said)  # fmt: skip


def images_source(folder: Path, size: tuple[int, int] | None) -> Source:
    """One sub-folder per class (sorted names are the labels 0, 1, ...), images inside."""
    try:
        from PIL import Image
    except ImportError:
        raise DataError("reading images needs Pillow: pip install pillow") from None
    classes = sorted(p.name for p in folder.iterdir() if p.is_dir())
    found = [(path, label) for label, name in enumerate(classes)
             for path in sorted((folder / name).iterdir())]  # fmt: skip
    files = [(path, label) for path, label in found if path.suffix.lower() in IMAGE_SUFFIXES]
    skipped = [path.relative_to(folder).as_posix() for path, _ in found
               if path.suffix.lower() not in IMAGE_SUFFIXES]  # fmt: skip
    skipped += [p.name for p in sorted(folder.iterdir()) if not p.is_dir()]
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
    layout = Layout((3, height, width), "uint8", 1 / 255)
    return Source(layout, labels, classes, features, skipped=skipped)


def open_source(
    src: str,
    image_size: tuple[int, int] | None,
    label: str | None = None,
    header: bool | None = None,
    options: Options | None = None,
    fractions: tuple[float, float, int] | None = None,
) -> Source:
    if is_local(src) and local_path(src).is_dir():
        return images_source(local_path(src), image_size)
    if not src.endswith((".npz", ".csv")):
        raise DataError(f"{src!r}: give a .npz, a .csv or a folder of images (one per class)")
    return arrays_source(src, label, header, options, fractions)
