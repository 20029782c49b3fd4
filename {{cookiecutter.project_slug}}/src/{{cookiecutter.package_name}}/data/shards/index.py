"""A prepared dataset's index.json: its splits, their shards (rows, bytes, sha256), and how one
sample's bytes become an array."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from ..splits import DataError
from ..uris import join, open_uri

FORMAT = "cloud-gpu-shards"


VERSION = 1


INDEX = "index.json"


SPLITS = ("train", "val", "test")


class ShardError(DataError):
    """A shard that is missing, truncated or not what the index says; the message names it."""


@dataclass(frozen=True)
class Shard:
    file: str  # relative to the dataset's root
    rows: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class Layout:
    """How one sample's bytes become an array: shape, stored dtype, and a scale to float32."""

    shape: tuple[int, ...]
    dtype: str
    scale: float = 1.0

    @property
    def sample_bytes(self) -> int:
        return int(np.prod(self.shape)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Index:
    root: str
    layout: Layout
    num_classes: int
    classes: list[str]
    splits: dict[str, list[Shard]]
    preparation: dict | None = None  # a .csv's fitted preparation (data/preparation.py)

    @classmethod
    def read(cls, root: str) -> Index:
        uri = join(root, INDEX)
        try:
            with open_uri(uri) as handle:
                raw = json.load(handle)
        except (FileNotFoundError, NotADirectoryError):
            raise DataError(
                f"data.source={root}: no {INDEX} there; make one with "
                f"`invoke data.prepare SRC {root}`"
            ) from None
        except OSError as error:  # a bucket refusing, or unreachable
            raise DataError(f"data.source={root}: cannot read {INDEX}: {error}") from None
        except json.JSONDecodeError as err:
            raise DataError(f"{uri}: not JSON ({err})") from None
        if raw.get("format") != FORMAT or raw.get("version") != VERSION:
            raise DataError(
                f"{uri}: format {raw.get('format')!r} version {raw.get('version')!r}; this project "
                f"reads {FORMAT!r} version {VERSION}"
            )
        missing = [name for name in SPLITS if not raw["splits"].get(name)]
        if missing:
            raise DataError(f"{uri}: no shards for split {', '.join(missing)}")
        layout = raw["layout"]
        for name in SPLITS:
            for shard in raw["splits"][name]:
                _check_name(str(shard.get("file", "")), uri)
        return cls(
            root=root,
            layout=Layout(tuple(layout["shape"]), layout["dtype"], float(layout["scale"])),
            num_classes=int(raw["num_classes"]),
            classes=list(raw["classes"]),
            splits={name: [Shard(**s) for s in raw["splits"][name]] for name in SPLITS},
            preparation=raw.get("preparation"),
        )


SHARD_NAME = re.compile(r"[A-Za-z0-9_-]+/[A-Za-z0-9_.-]+\.parquet")


def _check_name(name: str, uri: str) -> None:
    """A shard's name is `<split>/<file>.parquet` under the dataset's root: an absolute name or a
    `..` would read (and cache, so write) outside it, wherever the index says."""
    parts = name.split("/")
    if not SHARD_NAME.fullmatch(name) or ".." in parts or name.startswith("/"):
        raise DataError(
            f"{uri}: shard name {name!r} is not a split's file (as train/00000.parquet): "
            "an index.json that names files outside its dataset is refused"
        )
