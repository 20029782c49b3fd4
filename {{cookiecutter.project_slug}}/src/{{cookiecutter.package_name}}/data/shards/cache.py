"""Shards brought to this machine and checked against the index before they are read: a local
cache with a size limit for bucket sources, retries for network faults, one line for a damaged
or missing shard."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from pathlib import Path

import numpy as np

from ..uris import is_local, join, local_path, open_uri
from .index import Index, Shard, ShardError

log = logging.getLogger(__name__)


ATTEMPTS = 4  # reads of a shard before a network fault or a bad checksum is an error


BACKOFF_S = 0.5  # doubled after every failed attempt


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


_readers: dict[tuple[str, str, int, int], ShardReader] = {}


def reader_for(index: Index, cache_dir: str, cache_bytes: int) -> ShardReader:
    """One reader per process and dataset: what it verified stays verified."""
    key = (index.root, cache_dir, cache_bytes, os.getpid())
    if key not in _readers:
        _readers[key] = ShardReader(index, cache_dir, cache_bytes)
    return _readers[key]
