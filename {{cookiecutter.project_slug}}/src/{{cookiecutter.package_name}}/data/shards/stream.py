"""An epoch of a prepared dataset as batches: which shards, in which order, for which rank and
loader worker.

Framework-neutral: `ShardSplit.batches` yields NumPy batches; data/batches.py wraps them in the
framework's loader. The order of an epoch is a function of (seed, epoch) alone: shards shuffled,
then the rows of every `shuffle_block` consecutive shards shuffled together. A rank reads its own
contiguous part of that order; of its K loader workers, worker w makes batches w, w + K, w + 2K,
... and the loader takes one from each in turn, so the order does not depend on K, a resume skips
exactly the batches done, and a worker holds at most two blocks of shards in memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ..preparation import Preparation
from ..splits import Splits
from .cache import ShardReader, reader_for
from .index import SPLITS, Index, Shard


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
        return reader_for(self.index, self.cache_dir, self.cache_bytes)

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
    prepared = Preparation.from_dict(index.preparation) if index.preparation else None
    return Splits(num_classes=index.num_classes, preparation=prepared, **parts)
