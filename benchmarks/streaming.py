"""Streamed shards against in-memory arrays, PyTorch project: memory and throughput.

Memory: peak RSS of a whole training run (`python -m PACKAGE.train`, one epoch, the MLP, one
process: `data.num_workers=0`) on datasets of 1x, 4x and 16x a base size, read whole
(`data=files` on a .npz) and streamed (`data=shards` from a folder). Target: the streamed
runs' peak stays flat, within 64 MB of the 1x run's (a reader holds one block of 4 shards of
8 MB, and the next), while the in-memory one grows with the data.

Throughput: samples per second of training steps (the MLP, batch 256, one thread) over epochs 2
and 3, fed by the in-memory loader, by shards from local disk, and by shards from the local S3
endpoint (moto_server; the first epoch fills the cache), with two loader workers. Target: streamed
within 10% of in-memory. The loader alone (no model) is shown too: how fast reading is.

    invoke bench streaming [-- --base-mb 24 --sizes 1,4,16]

`invoke bench` bakes the default project, installs it in a venv of its own and runs this script
with that venv's Python and `--project`. The S3 rows need moto_server (pip install
'moto[server]'); without it they say so and are left out.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from cloudgpu.testing import services
from overhead import load_project

SAMPLE = (3, 32, 32)  # float32: 12 kB a sample
SPLIT = {"val_fraction": 0.05, "test_fraction": 0.05, "split_seed": 1234}


def make_dataset(
    folder: Path, megabytes: float, package: str, shard_mb: float
) -> tuple[Path, Path]:
    """A .npz of `megabytes` of random samples, and its shards; returns both paths."""
    prepare = importlib.import_module(f"{package}.data.shards.writer")
    count = int(megabytes * 1e6 // (4 * np.prod(SAMPLE)))
    rng = np.random.default_rng(0)
    x = rng.random((count, *SAMPLE), dtype=np.float32)
    y = rng.integers(0, 10, count)
    npz = folder / f"data-{megabytes:g}mb.npz"
    np.savez(npz, x=x, y=y)
    del x
    shards = folder / f"shards-{megabytes:g}mb"
    prepare.prepare(str(npz), str(shards), shard_mb=shard_mb, **SPLIT)
    return npz, shards


# Runs the training module and, as it exits, writes its peak RSS (VmHWM: since its exec, unlike
# getrusage's, which counts the memory of the process it was forked from).
PEAK_RSS = """
import atexit, runpy, sys
out, module, sys.argv = sys.argv[1], sys.argv[2], sys.argv[2:]
def note():
    status = open("/proc/self/status").read()
    open(out, "w").write(status.split("VmHWM:")[1].split()[0])
atexit.register(note)
runpy.run_module(module, run_name="__main__")
"""


def peak_rss_mb(package: str, project: Path, overrides: list[str], env: dict[str, str]) -> float:
    """Peak resident memory of one training run, in MB (one process: no loader workers)."""
    with tempfile.NamedTemporaryFile("r") as peak:
        command = [sys.executable, "-c", PEAK_RSS, peak.name, f"{package}.train", *overrides]
        done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"training failed: {' '.join(overrides)}\n{done.stdout}{done.stderr}")
        return int(Path(peak.name).read_text()) / 1024  # kB


def memory_table(
    package: str, project: Path, folder: Path, sizes: list[float], datasets: dict
) -> None:
    common = [
        "trainer.max_epochs=1", "trainer.device=cpu", "logger=jsonl", "data.num_workers=0",
        "data.batch_size=256", "trainer.progress_bar=false",
        f"data.val_fraction={SPLIT['val_fraction']}",
        f"data.test_fraction={SPLIT['test_fraction']}",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(project / "src")}
    rows = []
    for size in sizes:
        npz, shards = datasets[size]
        run = folder / "runs" / f"{size:g}"
        memory = peak_rss_mb(
            package,
            project,
            [*common, "data=files", f"data.source={npz}", f"hydra.run.dir={run}-files"],
            env,
        )
        streamed = peak_rss_mb(
            package,
            project,
            [*common, "data=shards", f"data.source={shards}", f"hydra.run.dir={run}-shards"],
            env,
        )
        rows.append((size, memory, streamed))
    base = sizes[0]
    print(f"\npeak RSS of a 1-epoch training run (MB); base {base:g}x = the first size")
    print(f"{'data':>10} {'in memory':>10} {'streamed':>10} {'streamed - its 1x':>18}")
    for size, memory, streamed in rows:
        print(f"{size:>9g}x {memory:>10.0f} {streamed:>10.0f} {streamed - rows[0][2]:>+18.0f}")
    growth = rows[-1][2] - rows[0][2]
    print(
        f"target: streamed within 64 MB of its 1x run at {sizes[-1]:g}x: {growth:+.0f} MB "
        f"({'met' if growth <= 64 else 'NOT met'})"
    )


def epoch_rate(
    package: str, split, train: bool, workers: int, epochs: int = 3
) -> tuple[float, float]:
    """Samples per second through the project's loader in the first epoch (workers starting, a
    bucket's shards downloading) and over epochs 2..`epochs`, with an MLP training step on every
    batch when `train`."""
    import torch

    batches = importlib.import_module(f"{package}.data.batches")
    mlp = importlib.import_module(f"{package}.models.mlp")
    torch.manual_seed(0)
    model = mlp.MLP(SAMPLE, 10)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = batches.make_loader(split, 256, shuffle=True, seed=0, num_workers=workers)
    seen, seconds = [0] * epochs, [0.0] * epochs
    for epoch in range(epochs):
        batches.epoch_sampler(loader).set_epoch(epoch)
        started = time.perf_counter()
        for x, y in loader:
            if train:
                optimizer.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            seen[epoch] += len(y)
        seconds[epoch] = time.perf_counter() - started
    return seen[0] / seconds[0], sum(seen[1:]) / sum(seconds[1:])


def throughput_table(package: str, folder: Path, npz: Path, shards: Path, shard_mb: float) -> None:
    data = importlib.import_module(f"{package}.data.sources")
    streaming = importlib.import_module(f"{package}.data.shards.stream")
    prepare = importlib.import_module(f"{package}.data.shards.writer")
    in_memory = data.load_splits(str(npz), *SPLIT.values()).train
    sources: dict[str, object] = {
        "in memory": in_memory,
        "shards, local disk": streaming.load_splits(
            str(shards), 4, 2, str(folder / "c1"), 20
        ).train,
    }
    with services.moto_server() as url:  # cloudgpu's, in the project's venv
        if url is None:
            print("(no moto_server here: the S3 rows are left out; pip install 'moto[server]')")
        else:
            os.environ.update(AWS_ENDPOINT_URL=url, **services.MOTO_CREDENTIALS)
            import s3fs

            s3fs.S3FileSystem().mkdir("bench")
            prepare.prepare(str(npz), "s3://bench/data", shard_mb=shard_mb, **SPLIT)
            cache = str(folder / "s3-cache")
            sources["shards, S3"] = streaming.load_splits("s3://bench/data", 4, 2, cache, 20).train
        rates = {}
        for name, split in sources.items():
            workers = 0 if name == "in memory" else 2
            rates[name] = (
                *epoch_rate(package, split, True, workers),
                epoch_rate(package, split, False, workers)[1],
            )
    print(
        f"\nthroughput, {len(in_memory)} training samples of {'x'.join(map(str, SAMPLE))} float32 "
        f"({npz.stat().st_size / 1e6:.0f} MB), batch 256, 1 torch thread, 2 loader workers"
    )
    print(
        f"{'source':<20} {'1st epoch':>10} {'epochs 2-3':>11} {'vs in memory':>13} "
        f"{'loader alone':>13}   (samples/s)"
    )
    base = rates["in memory"][1]
    for name, (first, steady, alone) in rates.items():
        print(f"{name:<20} {first:>10.0f} {steady:>11.0f} {steady / base:>13.3f} {alone:>13.0f}")
    print(
        "target: streamed training within 10% of in memory in epochs 2-3 (vs in memory >= "
        "0.90); the S3 first epoch downloads every shard into the cache"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-mb", type=float, default=40, help="more than a block (32 MB)")
    parser.add_argument("--sizes", default="1,4,16", help="multiples of --base-mb")
    parser.add_argument("--shard-mb", type=float, default=8)
    parser.add_argument("--project", type=Path, required=True, help="a baked project")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    project = args.project.resolve()
    package = load_project(project)
    sizes = [float(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="streaming-") as scratch:
        folder = Path(scratch)
        datasets = {
            s: make_dataset(folder, s * args.base_mb, package, args.shard_mb) for s in sizes
        }
        print(
            f"datasets: {', '.join(f'{s:g}x = {s * args.base_mb:g} MB' for s in sizes)}; shards "
            f"of {args.shard_mb:g} MB, shuffle blocks of 4"
        )
        memory_table(package, project, folder, sizes, datasets)
        middle = sizes[len(sizes) // 2]
        throughput_table(package, folder, *datasets[middle], args.shard_mb)


if __name__ == "__main__":
    main()
