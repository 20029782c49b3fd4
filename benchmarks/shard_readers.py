"""Shard readers alone, PyTorch project: what one reader delivers, beside the same arrays read
from memory.

The GPU check on an H200 trained the compiled CNN at 137,661 samples/s from memory and 82,164
from shards with 4 readers: the readers set the pace. This measures the readers without a model,
so the figure is theirs: samples per second (and per CPU-second, steadier on a shared machine)
of batches of random rows of 3x32x32 float32 images (12 kB a sample, as the GPU check's),

- gathered from an in-memory array, in this process: the floor a reader cannot beat;
- read from local shards in this process (`ShardSplit.batches`: one reader's own work);
- through the project's loader with 1, 2 and 4 worker processes, as training gets them (the
  batch then crosses to this process in shared memory): in all, and per reader;

and the peak memory (RSS, MB) of this process and of its readers. A reader holds one block of
shards and the next; the batch it hands over is its only other memory.

    invoke bench readers [-- --samples 20000 --batches 200]

`invoke bench` bakes the default project, installs it in a venv of its own and runs this script
with that venv's Python and `--project`.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import os
import resource
import tempfile
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np
from overhead import load_project

SAMPLE = (3, 32, 32)  # float32: 12 kB a sample, as the GPU check's images
SPLIT = {"val_fraction": 0.02, "test_fraction": 0.02, "split_seed": 1234}
BATCH = 512


def rate(batches: Iterable, limit: int) -> tuple[float, float]:
    """Samples per second and per CPU-second (this process's) over `limit` batches, after one."""
    iterator = iter(batches)
    next(iterator)  # workers started, the first block read
    seen, wall, cpu = 0, time.perf_counter(), time.process_time()
    for x, _ in itertools.islice(iterator, limit):
        seen += len(x)
    return seen / (time.perf_counter() - wall), seen / max(time.process_time() - cpu, 1e-9)


def in_memory(x: np.ndarray, y: np.ndarray) -> Iterable:
    """Batches of shuffled rows of in-memory arrays, gathered into batches of their own."""
    order = np.random.default_rng(0).permutation(len(x))
    while True:
        for start in range(0, len(order) - BATCH + 1, BATCH):
            rows = order[start : start + BATCH]
            yield x[rows], y[rows]


def epochs(split, **options) -> Iterable:
    """A split's batches, epoch after epoch, from one reader in this process."""
    epoch = 0
    while True:
        yield from split.batches(BATCH, epoch=epoch, shuffle=True, **options)
        epoch += 1


def loader_epochs(package: str, split, workers: int) -> Iterable:
    batches = importlib.import_module(f"{package}.data.batches")
    loader = batches.make_loader(replace(split, readers=workers), BATCH, shuffle=True, seed=0)
    epoch = 0
    while True:
        batches.epoch_sampler(loader).set_epoch(epoch)
        yield from loader
        epoch += 1


def peak_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # kB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--batches", type=int, default=200, help="timed batches per row")
    parser.add_argument("--shard-mb", type=float, default=16, help="as the GPU check's")
    parser.add_argument("--project", type=Path, required=True, help="a baked project")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    package = load_project(args.project.resolve())
    stream = importlib.import_module(f"{package}.data.shards.stream")
    writer = importlib.import_module(f"{package}.data.shards.writer")
    rows: list[tuple[str, int, float, float, float]] = []  # name, readers, samples/s, per CPU-s, MB
    with tempfile.TemporaryDirectory(prefix="readers-") as scratch:
        rng = np.random.default_rng(0)
        x = rng.random((args.samples, *SAMPLE), dtype=np.float32)
        y = rng.integers(0, 10, args.samples)
        npz = Path(scratch) / "data.npz"
        np.savez(npz, x=x, y=y)
        writer.prepare(str(npz), f"{scratch}/shards", shard_mb=args.shard_mb, **SPLIT)
        split = stream.load_splits(f"{scratch}/shards", 4, 0, f"{scratch}/cache", 10).train
        rows.append(("arrays in memory, this process", 0, *rate(in_memory(x, y), args.batches),
                     peak_mb()))  # fmt: skip
        del x, y
        rows.append(("shards, this process", 1, *rate(epochs(split), args.batches), peak_mb()))
        for workers in (1, 2, 4):
            wall, _ = rate(loader_epochs(package, split, workers), args.batches)
            rows.append((f"shards, loader, {workers} worker(s)", workers, wall, float("nan"),
                         peak_mb(resource.RUSAGE_CHILDREN)))  # fmt: skip
    cores = len(os.sched_getaffinity(0))
    print(
        f"\nshard readers: batches of {BATCH} random rows of {'x'.join(map(str, SAMPLE))} float32 "
        f"({4 * int(np.prod(SAMPLE)) / 1e3:.1f} kB a sample), {args.batches} batches a row, "
        f"{cores} cores here"
    )
    print(f"{'source':<34} {'samples/s':>10} {'per reader':>11} {'per CPU-s':>10} {'peak MB':>8}")
    for name, readers, wall, per_cpu, memory in rows:
        per = wall / readers if readers else wall
        cpu = "" if per_cpu != per_cpu else f"{per_cpu:.0f}"  # NaN: the workers' CPU is not ours
        print(f"{name:<34} {wall:>10.0f} {per:>11.0f} {cpu:>10} {memory:>8.0f}")
    print(
        "peak MB: this process for the first rows, its largest reader for the loader rows. A "
        "loader with K workers delivers at most K x one reader's rate, and no more than the cores "
        "it is given; data.num_workers=auto gives each training process its share of the cores."
    )


if __name__ == "__main__":
    main()
