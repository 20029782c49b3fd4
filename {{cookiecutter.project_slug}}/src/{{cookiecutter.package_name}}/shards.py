"""Datasets larger than memory: Parquet shards with an index, read as a stream (`data=shards`).

A prepared dataset (`invoke data.prepare SRC DEST`, prepare.py) is a folder or a bucket prefix:

    index.json           splits -> shards (rows, bytes, sha256), the sample's shape and dtype
    train/00000.parquet  columns x (one sample's bytes) and y (its label); val/, test/ alike

Framework-neutral: `ShardSplit.batches` yields NumPy batches; batches.py wraps them in the
framework's loader (a DataLoader, or a tf.data pipeline). The order of an epoch is a function of
(seed, epoch) alone: shards shuffled, then the rows of every `shuffle_block` consecutive shards
shuffled together. A rank reads its own contiguous part of that order; of its K loader workers,
worker w makes batches w, w + K, w + 2K, ... and the loader takes one from each in turn, so the
order does not depend on K, a resume skips exactly the batches done, and a worker holds
at most two blocks of shards in memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .data import FSSPEC_BACKENDS, DataError, Splits

log = logging.getLogger(__name__)
# The bucket clients log every credential lookup at INFO; their warnings still show.
for _client in ("botocore", "aiobotocore", "s3fs", "gcsfs", "adlfs", "azure"):
    logging.getLogger(_client).setLevel(logging.WARNING)

FORMAT = "cloud-gpu-shards"
VERSION = 1
INDEX = "index.json"
SPLITS = ("train", "val", "test")
ATTEMPTS = 4  # reads of a shard before a network fault or a bad checksum is an error
BACKOFF_S = 0.5  # doubled after every failed attempt


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


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def open_uri(uri: str, mode: str = "rb") -> Any:
    """fsspec's open, with the error for a missing bucket backend named as data.py names it."""
    import fsspec

    try:
        return fsspec.open(uri, mode)
    except ImportError as err:
        scheme = uri.split("://", 1)[0]
        package = FSSPEC_BACKENDS.get(scheme, "the fsspec backend for it")
        raise DataError(f"reading {uri!r} needs {package}: pip install {package}") from err
    except ValueError as err:  # fsspec: "Protocol not known"
        raise DataError(f"cannot read {uri!r}: {err}") from err


@dataclass(frozen=True)
class Index:
    root: str
    layout: Layout
    num_classes: int
    classes: list[str]
    splits: dict[str, list[Shard]]

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
        return cls(
            root=root,
            layout=Layout(tuple(layout["shape"]), layout["dtype"], float(layout["scale"])),
            num_classes=int(raw["num_classes"]),
            classes=list(raw["classes"]),
            splits={name: [Shard(**s) for s in raw["splits"][name]] for name in SPLITS},
        )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def _transient(error: BaseException) -> bool:
    """A network fault worth another try; a missing shard or a refusal is not."""
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return False
    return isinstance(error, (OSError, TimeoutError, ConnectionError))


class ShardReader:
    """Brings shards to this machine (a local cache with a size limit, for bucket sources) and
    reads them into arrays, each checked against the index's size and sha256 first."""

    def __init__(self, index: Index, cache_dir: str, cache_bytes: int) -> None:
        self.index, self.cache_bytes = index, cache_bytes
        # One cache folder per dataset: two datasets' train/00000.parquet never meet.
        tag = hashlib.sha256(index.root.encode()).hexdigest()[:16]
        self.cache = Path(cache_dir) / tag
        self._lock = threading.Lock()

    def path(self, shard: Shard) -> Path:
        """The shard as a local file, verified."""
        if is_local(self.index.root):
            path = local_path(self.index.root) / shard.file
            self._check_once(path, shard)
            return path
        cached = self.cache / shard.file
        with contextlib.suppress(FileNotFoundError):  # evicted by another process meanwhile
            if cached.stat().st_size == shard.bytes:
                os.utime(cached)  # recently used: evicted last
                return cached
        return self._download(shard, cached)

    def _check_once(self, path: Path, shard: Shard) -> None:
        """`_check`, and a note in the cache folder so that other processes (each epoch's loader
        workers) and later runs skip the hashing while the file stays as it was."""
        note = self.cache / f"{shard.file}.checked"
        try:
            stat = path.stat()
        except FileNotFoundError:
            stat = None
        seen = f"{stat.st_size} {stat.st_mtime_ns} {shard.sha256}" if stat else ""
        if stat and note.is_file() and note.read_text(encoding="utf-8") == seen:
            return
        self._check(path, shard)
        note.parent.mkdir(parents=True, exist_ok=True)
        note.write_text(seen, encoding="utf-8")

    def _check(self, path: Path, shard: Shard) -> None:
        name = join(self.index.root, shard.file)
        if not path.is_file():
            raise ShardError(f"shard {name} is missing (the index lists it)")
        size = path.stat().st_size
        if size != shard.bytes:
            raise ShardError(
                f"shard {name} is {size} bytes, the index says {shard.bytes}: truncated?"
            )
        if sha256_of(path) != shard.sha256:
            raise ShardError(f"shard {name} fails its sha256 check: changed since it was prepared")

    def _download(self, shard: Shard, cached: Path) -> Path:
        uri = join(self.index.root, shard.file)
        cached.parent.mkdir(parents=True, exist_ok=True)
        # Loader workers (and other jobs on this machine) that want it too wait for this one.
        with cached.with_name(f".{cached.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if cached.is_file() and cached.stat().st_size == shard.bytes:
                return cached
            part = cached.with_name(f".{cached.name}.part")
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    with open_uri(uri) as source, part.open("wb") as target:
                        while chunk := source.read(1 << 22):
                            target.write(chunk)
                    self._check(part, shard)
                    os.replace(part, cached)  # whole or not at all
                    self._evict(keep=cached)
                    return cached
                except FileNotFoundError:
                    part.unlink(missing_ok=True)
                    raise ShardError(f"shard {uri} is missing (the index lists it)") from None
                except (ShardError, OSError, ConnectionError) as error:
                    part.unlink(missing_ok=True)
                    bad = isinstance(error, ShardError)
                    if not (bad or _transient(error)) or attempt == ATTEMPTS:
                        raise (error if bad else ShardError(f"shard {uri}: {error}")) from None
                    log.warning("shard %s: %s; try %d of %d", uri, error, attempt + 1, ATTEMPTS)
                    time.sleep(BACKOFF_S * 2 ** (attempt - 1))
        raise AssertionError("unreachable")

    def _evict(self, keep: Path) -> None:
        """Least recently used shards go until the cache fits its limit (never `keep`)."""
        with self._lock:
            sizes = {}
            for path in self.cache.parent.rglob("*.parquet"):
                with contextlib.suppress(FileNotFoundError):  # another process evicted it
                    stat = path.stat()
                    sizes[path] = (stat.st_mtime, stat.st_size)
            total = sum(size for _, size in sizes.values())
            for path, (_, size) in sorted(sizes.items(), key=lambda item: item[1][0]):
                if total <= self.cache_bytes:
                    break
                if path != keep:
                    total -= size
                    path.unlink(missing_ok=True)

    def read(self, shard: Shard) -> tuple[np.ndarray, np.ndarray]:
        """A shard's features (as stored: the layout's dtype) and labels."""
        import pyarrow.parquet as pq

        for attempt in (1, 2):
            path = self.path(shard)
            try:
                table = pq.read_table(path, columns=["x", "y"])
                break
            except FileNotFoundError:  # a full cache evicted it between fetch and read
                if attempt == 2:
                    raise ShardError(f"shard {shard.file}: evicted as soon as fetched; "
                                     "raise data.shards.cache_gb") from None  # fmt: skip
            except Exception as error:  # pyarrow's ArrowInvalid and friends: a damaged file
                raise ShardError(f"shard {join(self.index.root, shard.file)}: {error}") from None
        layout = self.index.layout
        column = table.column("x").combine_chunks()
        # Fixed-size binary: one contiguous buffer of rows x sample_bytes, read without a copy.
        raw = np.frombuffer(
            column.buffers()[1],
            dtype=np.uint8,
            offset=column.offset * layout.sample_bytes,
            count=len(column) * layout.sample_bytes,
        )
        x = raw.view(layout.dtype).reshape(len(column), *layout.shape)
        y = table.column("y").to_numpy().astype(np.int64, copy=False)
        if len(y) != shard.rows:
            raise ShardError(f"shard {shard.file}: {len(y)} rows, the index says {shard.rows}")
        return x, y


# ---- the order of an epoch ------------------------------------------------------------------


def rank_range(samples: int, rank: int, world: int, even: bool) -> tuple[int, int]:
    """This rank's positions in the epoch's order. `even` (training: every rank takes the same
    number of steps) gives each samples // world and leaves out the last samples % world."""
    if even:
        per = samples // world
        return rank * per, (rank + 1) * per
    return samples * rank // world, samples * (rank + 1) // world


@dataclass
class EpochPlan:
    """The order of one epoch over a split's shards (positions 0..samples-1)."""

    rows: list[int]
    seed: int
    epoch: int
    shuffle: bool
    block: int
    blocks: list[list[int]] = field(init=False)  # shard numbers of each block, in order
    starts: np.ndarray = field(init=False)  # the first position of each block, and the end

    def __post_init__(self) -> None:
        shards = np.arange(len(self.rows))
        if self.shuffle:
            shards = np.random.default_rng([self.seed, self.epoch]).permutation(shards)
        self.blocks = [list(shards[i : i + self.block]) for i in range(0, len(shards), self.block)]
        sizes = [sum(self.rows[s] for s in block) for block in self.blocks]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def row_order(self, block: int) -> np.ndarray:
        size = int(self.starts[block + 1] - self.starts[block])
        if not self.shuffle:
            return np.arange(size)
        return np.random.default_rng([self.seed, self.epoch, block]).permutation(size)

    def blocks_between(self, start: int, stop: int) -> range:
        first = int(np.searchsorted(self.starts, start, side="right")) - 1
        last = int(np.searchsorted(self.starts, stop, side="left"))
        return range(max(first, 0), min(last, len(self.blocks)))


@dataclass(frozen=True)
class ShardSplit:
    """One split of a prepared dataset, streamed. Behaves like data.Split where it must:
    len() is its sample count, `sample_shape` its input shape."""

    index: Index
    name: str
    shuffle_block: int
    readers: int  # data.num_workers: loader processes, or tf.data's reading threads
    cache_dir: str
    cache_bytes: int

    @property
    def shards(self) -> list[Shard]:
        return self.index.splits[self.name]

    def __len__(self) -> int:
        return sum(shard.rows for shard in self.shards)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return self.index.layout.shape

    def reader(self) -> ShardReader:
        return _reader(self.index, self.cache_dir, self.cache_bytes)

    def batches(
        self,
        batch_size: int,
        *,
        epoch: int = 0,
        seed: int = 0,
        shuffle: bool = False,
        rank: int = 0,
        world: int = 1,
        even: bool = False,
        worker: int = 0,
        workers: int = 1,
        skip_batches: int = 0,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The batches loader worker `worker` of `workers` makes for `rank` in `epoch`, as float32
        features and int64 labels, from the `skip_batches`-th of the rank's epoch on.

        Worker w makes the rank's batches skip + w, skip + w + workers, ...: a loader that takes
        one from each worker in turn (from the first) hands them out in the epoch's order,
        whatever the number of workers."""
        plan = EpochPlan([s.rows for s in self.shards], seed, epoch, shuffle, self.shuffle_block)
        low, high = rank_range(len(self), rank, world, even)
        count = math.ceil((high - low) / batch_size)
        spans = [
            (low + b * batch_size, min(low + (b + 1) * batch_size, high))
            for b in range(skip_batches + worker, count, workers)
        ]
        yield from _stream(self.reader(), self.shards, plan, spans)


@dataclass
class Block:
    """The shards of one block as read (each its own array) and the block's row order: a batch
    gathers its rows straight from them, so no copy of the whole block is ever made."""

    xs: list[np.ndarray]
    ys: list[np.ndarray]
    bounds: np.ndarray  # the first row of each shard in the block, and the end
    order: np.ndarray  # the block's rows in the epoch's order

    def gather(self, begin: int, end: int, out: np.ndarray, labels: np.ndarray) -> None:
        """Rows begin..end of the block's order into `out` (converted to its dtype) and `labels`."""
        rows = self.order[begin:end]
        shard_of = np.searchsorted(self.bounds, rows, side="right") - 1
        for number in np.unique(shard_of):
            chosen = shard_of == number
            local = rows[chosen] - self.bounds[number]
            out[chosen] = self.xs[number][local]
            labels[chosen] = self.ys[number][local]


def _stream(
    reader: ShardReader, shards: list[Shard], plan: EpochPlan, spans: list[tuple[int, int]]
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """One batch per span of positions of `plan`, in order. A block's shards are read once and
    kept while spans fall in it; the next block's are fetched in the background meanwhile."""
    layout = reader.index.layout
    held: dict[int, Block] = {}
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-fetch") as pool:
        ahead: Future | None = None
        for start, stop in spans:
            x = np.empty((stop - start, *layout.shape), np.float32)  # the batch owns its memory
            y = np.empty(stop - start, np.int64)
            for number in plan.blocks_between(start, stop):
                if number not in held:
                    if ahead is not None:
                        ahead.result()  # fetched (or its error raised here, by name)
                    held = {k: v for k, v in held.items() if k >= number}  # done with older ones
                    held[number] = _block(reader, shards, plan, number)
                    if number + 1 < len(plan.blocks):
                        following = [shards[s] for s in plan.blocks[number + 1]]
                        ahead = pool.submit(_fetch, reader, following)
                begin = int(plan.starts[number])
                low, high = max(start, begin), min(stop, int(plan.starts[number + 1]))
                held[number].gather(
                    low - begin,
                    high - begin,
                    x[low - start : high - start],
                    y[low - start : high - start],
                )
            if layout.scale != 1.0:
                x *= np.float32(layout.scale)
            yield x, y


def _block(reader: ShardReader, shards: list[Shard], plan: EpochPlan, number: int) -> Block:
    parts = [reader.read(shards[s]) for s in plan.blocks[number]]
    bounds = np.concatenate([[0], np.cumsum([len(p[1]) for p in parts])])
    return Block([p[0] for p in parts], [p[1] for p in parts], bounds, plan.row_order(number))


def _fetch(reader: ShardReader, shards: list[Shard]) -> None:
    for shard in shards:
        reader.path(shard)


_readers: dict[tuple[str, str, int, int], ShardReader] = {}


def _reader(index: Index, cache_dir: str, cache_bytes: int) -> ShardReader:
    """One reader per process and dataset: what it verified stays verified."""
    key = (index.root, cache_dir, cache_bytes, os.getpid())
    if key not in _readers:
        _readers[key] = ShardReader(index, cache_dir, cache_bytes)
    return _readers[key]


def load_splits(
    source: str, shuffle_block: int, readers: int, cache_dir: str, cache_gb: float
) -> Splits:
    """The three splits of the prepared dataset at `source`, streamed."""
    index = Index.read(source)
    cache_bytes = int(cache_gb * 1e9)
    parts = {
        name: ShardSplit(index, name, shuffle_block, readers, cache_dir, cache_bytes)
        for name in SPLITS
    }
    return Splits(num_classes=index.num_classes, **parts)
