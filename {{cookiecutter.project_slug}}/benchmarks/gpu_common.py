"""The half of benchmarks/gpu.py that does not depend on the framework: its flags, its data
(random images, in memory and as streamed shards), its configs, the GPU's busy share and the
table. `python benchmarks/gpu.py` puts this folder on the import path."""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from hydra import compose, initialize_config_dir

from {{ cookiecutter.package_name }}.config.schema import register
from {{ cookiecutter.package_name }}.data.shards import stream
from {{ cookiecutter.package_name }}.data.shards.writer import prepare
from {{ cookiecutter.package_name }}.data.sources import load_splits, readers

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = (3, 32, 32)
SPLIT = {"val_fraction": 0.02, "test_fraction": 0.02, "split_seed": 1234}
# (data source, compiled, bare samples/s, Trainer samples/s, bare busy %, Trainer busy %)
Row = tuple[str, bool, float, float, list[float], list[float]]


def count(text: str) -> int:
    """A flag's whole number, 0 or more (0: the default)."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (0 for the default)")
    return int(text)


def widths(text: str) -> list[int]:
    """The CNN's channel widths: positive whole numbers, comma-separated."""
    parts = text.split(",")
    if not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive widths, e.g. 128,256")
    return [int(part) for part in parts]


def arguments(doc: str) -> argparse.Namespace:
    """The flags, with the sizes that depend on --quick filled in; `compiles` the variants."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="a small dataset, for a smoke test")
    parser.add_argument("--compile", default="both", choices=["both", "no", "yes"])
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--samples", type=count, default=0, help="default 40000 (quick: 256)")
    parser.add_argument("--batch-size", type=count, default=0, help="default 512 (quick: 64)")
    parser.add_argument(
        "--epochs", type=count, default=0, help="default 8 (quick: 2); the first is the warm-up"
    )
    parser.add_argument(
        "--channels", type=widths, help="the CNN's widths; default 128,256 (quick: 32,64)"
    )
    parser.add_argument(
        "--rounds", type=count, default=0, help="default 2 (quick: 1); each loop's fastest counts"
    )
    parser.add_argument("--json", default="", help="also write the rows to this JSON file")
    args = parser.parse_args()
    # Wide enough that a step's kernels outlast the host's work for it on a large GPU: what
    # "compute-bound" means here (the default CNN's 32,64 leaves an H100 waiting for the host).
    args.channels = args.channels or ([32, 64] if args.quick else [128, 256])
    args.samples = args.samples or (256 if args.quick else 40_000)
    args.epochs = args.epochs or (2 if args.quick else 8)
    args.batch_size = args.batch_size or (64 if args.quick else 512)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.compiles = {"both": (False, True), "no": (False,), "yes": (True,)}[args.compile]
    return args


def sources(scratch: str, count: int) -> dict[str, Any]:
    """The same random images twice: loaded into memory, and prepared as shards and streamed."""
    rng = np.random.default_rng(0)
    npz = Path(scratch) / "data.npz"
    np.savez(npz, x=rng.random((count, *SAMPLE), dtype=np.float32), y=rng.integers(0, 10, count))
    prepare(str(npz), f"{scratch}/shards", shard_mb=16, **SPLIT)
    return {
        "in memory": load_splits(str(npz), *SPLIT.values()),
        "streamed": stream.load_splits(
            f"{scratch}/shards", 4, readers("auto"), f"{scratch}/cache", 10
        ),
    }


def config(args: argparse.Namespace, compiled: bool) -> Any:
    """The run's config, composed as `python -m {{ cookiecutter.package_name }}.train` composes it."""
    overrides = [
        f"trainer={'gpu' if args.device == 'cuda' else 'cpu'}",
        f"trainer.precision={args.precision}", f"trainer.compile={str(compiled).lower()}",
        f"trainer.max_epochs={args.epochs}",
        "trainer.progress_bar=false", "model=cnn", f"data.batch_size={args.batch_size}",
        f"model.channels=[{','.join(map(str, args.channels))}]",
        "callbacks.early_stopping=null", "logger=jsonl",
    ]  # fmt: skip
    register()  # the typed schema the configs build on
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("train", overrides=overrides)


Measured = tuple[float, list[float]]  # seconds per epoch, GPU busy samples


def alternate(rounds: int, bare: Callable[[], Measured], ours: Callable[[], Measured]) -> tuple:
    """The bare loop and the Trainer in turn, `rounds` times; each one's fastest round. A busy
    or warming machine only ever slows a round down, and both loops get the same chances."""
    bares, ourses = [], []
    for _ in range(rounds):
        bares.append(bare())
        ourses.append(ours())
    return min(bares, key=lambda measured: measured[0]), min(ourses, key=lambda m: m[0])


class BusySampler:
    """GPU `index`'s utilization (%), sampled by nvidia-smi every 100 ms from start() to stop(),
    counted only inside the spans marked with `span()` (the timed epochs: not compilation, nor
    validation, nor checkpoints). nvidia-smi starts and stops outside those spans (it takes a
    while to do either); on a CPU it samples nothing."""

    def __init__(self, on_gpu: bool, index: int = 0) -> None:
        self.on = on_gpu and shutil.which("nvidia-smi") is not None
        self.index = index
        self.process: subprocess.Popen[str] | None = None
        self.spans: list[tuple[float, float]] = []

    def start(self) -> None:
        if self.on and self.process is None:
            query = [
                "nvidia-smi", f"--id={self.index}", "--query-gpu=timestamp,utilization.gpu",
                "--format=csv,noheader,nounits", "-lms", "100",
            ]  # fmt: skip
            self.process = subprocess.Popen(query, stdout=subprocess.PIPE, text=True)

    @contextmanager
    def span(self) -> Iterator[None]:
        began = time.time()
        yield
        self.spans.append((began, time.time()))

    def stop(self) -> list[float]:
        if self.process is None:
            return []
        self.process.terminate()
        out, _ = self.process.communicate(timeout=10)
        self.process = None
        samples = []
        for line in out.splitlines():  # "2026/12/04 12:06:01.123, 87", in local time
            stamp, _, value = line.rpartition(",")
            try:
                when = datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
                busy = float(value)
            except ValueError:
                continue
            if any(began <= when <= ended for began, ended in self.spans):
                samples.append(busy)
        return samples


def print_table(title: str, compiler: str, args: argparse.Namespace, rows: list[Row]) -> None:
    """The table: one row per data source and compile setting, the Trainer beside the bare loop."""
    shape = "x".join(map(str, SAMPLE))
    print(
        f"\n{title}, {args.precision}, CNN {args.channels}, batch {args.batch_size}, "
        f"{args.samples} samples of {shape}; medians of epochs 2-{args.epochs}, the "
        f"faster of {args.rounds} rounds"
    )
    print(
        f"{'data':<10} {compiler:<8} {'bare samples/s':>15} {'Trainer samples/s':>18} "
        f"{'Trainer/bare':>13} {'GPU busy bare':>14} {'GPU busy Trainer':>17}"
    )

    def share(samples: list[float]) -> str:
        return f"{statistics.mean(samples):.0f}%" if samples else "n/a"

    for source, compiled, base, ours, base_busy, ours_busy in rows:
        print(
            f"{source:<10} {'yes' if compiled else 'no':<8} {base:>15.0f} {ours:>18.0f} "
            f"{ours / base:>13.3f} {share(base_busy):>14} {share(ours_busy):>17}"
        )


def write_json(path: str, title: str, args: argparse.Namespace, rows: list[Row]) -> None:
    """The table's rows as JSON (benchmarks/gpu_check.py reads them into its report)."""

    def share(samples: list[float]) -> float | None:
        return round(statistics.mean(samples), 1) if samples else None

    record = {
        "title": title,
        "precision": args.precision,
        "batch_size": args.batch_size,
        "channels": args.channels,
        "samples": args.samples,
        "epochs": args.epochs,
        "rounds": args.rounds,
        "rows": [
            {
                "data": source,
                "compiled": compiled,
                "bare_samples_per_s": round(base, 1),
                "trainer_samples_per_s": round(ours, 1),
                "trainer_over_bare": round(ours / base, 4),
                "gpu_busy_bare_pct": share(base_busy),
                "gpu_busy_trainer_pct": share(ours_busy),
            }
            for source, compiled, base, ours, base_busy, ours_busy in rows
        ],
    }
    Path(path).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
