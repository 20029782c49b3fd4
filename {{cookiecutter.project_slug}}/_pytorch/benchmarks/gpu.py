"""GPU throughput: the project's Trainer against a bare loop on the same loader, in bf16, with and
without torch.compile, on in-memory arrays and on streamed shards. One command, one table, a few
minutes on one NVIDIA GPU, after nothing but the project's own install (`invoke setup`):

    python benchmarks/gpu.py              # the first GPU; about 3 minutes
    python benchmarks/gpu.py --device cpu --quick --compile no --precision fp32  # tests, a CPU

Rows: samples per second over the epochs after the first (compilation and warm-up excluded),
the Trainer's rate as a share of the bare loop's, and the GPU's busy share over the timed epochs
(`nvidia-smi` sampled every 100 ms; "n/a" without one).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402

from {{ cookiecutter.package_name }} import batches, data, fit, loop, prepare, runtime, shards, tracking  # noqa: E402
from {{ cookiecutter.package_name }}.schema import register  # noqa: E402
from {{ cookiecutter.package_name }}.signals import GracefulStop  # noqa: E402

SAMPLE = (3, 32, 32)
SPLIT = {"val_fraction": 0.02, "test_fraction": 0.02, "split_seed": 1234}


@contextlib.contextmanager
def gpu_busy(device: torch.device) -> Iterator[list[float]]:
    """Samples of the GPU's utilization (%) while the block runs; none on a CPU."""
    samples: list[float] = []
    if device.type != "cuda" or shutil.which("nvidia-smi") is None:
        yield samples
        return
    query = [
        "nvidia-smi",
        f"--id={device.index or 0}",
        "--query-gpu=utilization.gpu",
        "--format=csv,noheader,nounits",
        "-lms",
        "100",
    ]
    sampler = subprocess.Popen(query, stdout=subprocess.PIPE, text=True)
    try:
        yield samples
    finally:
        sampler.terminate()
        out, _ = sampler.communicate(timeout=10)
        samples += [float(line) for line in out.split() if line.replace(".", "", 1).isdigit()]


def config(device: str, precision: str, compiled: bool, batch_size: int, epochs: int) -> object:
    overrides = [
        f"trainer={'gpu' if device == 'cuda' else 'cpu'}", f"trainer.precision={precision}",
        f"trainer.compile={str(compiled).lower()}", f"trainer.max_epochs={epochs}",
        "trainer.progress_bar=false", "model=cnn", f"data.batch_size={batch_size}",
        "callbacks.early_stopping=null", "logger=jsonl",
    ]  # fmt: skip
    register()  # the typed schema the configs build on
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("train", overrides=overrides)


def timed_epochs(run_epoch, epochs: int, device: torch.device) -> tuple[float, list[float]]:
    """Seconds per epoch (median of all but the first), and the busy samples of those epochs."""
    run_epoch(0)  # warm-up: compilation, cuDNN's autotuning, the allocator
    seconds = []
    with gpu_busy(device) as busy:
        for epoch in range(1, epochs):
            if device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            run_epoch(epoch)
            if device.type == "cuda":
                torch.cuda.synchronize()
            seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), busy


def bare(cfg, splits, rt, compiled: bool, epochs: int) -> tuple[float, list[float]]:
    """A hand-written loop over the project's loader: forward (bf16 autocast), backward, AdamW."""
    model = instantiate(cfg.model, input_shape=splits.input_shape, num_classes=10).to(rt.device)
    net = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    pin = rt.device.type == "cuda"
    bf16 = cfg.trainer.precision == "bf16"
    loader = batches.make_loader(
        splits.train,
        cfg.data.batch_size,
        shuffle=True,
        seed=0,
        num_workers=cfg.data.num_workers,
        pin_memory=pin,
    )

    def run_epoch(epoch: int) -> None:
        batches.epoch_sampler(loader).set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(rt.device, non_blocking=True), y.to(rt.device, non_blocking=True)
            with torch.autocast(rt.device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return timed_epochs(run_epoch, epochs, rt.device)


def trainer(cfg, splits, rt, epochs: int) -> tuple[float, list[float]]:
    """The project's Trainer, built as fit.py builds it; epochs timed one by one."""
    with tempfile.TemporaryDirectory() as run_dir:
        tracker = tracking.start(Path(run_dir), {}, {}, enabled=True)
        made = loop.Trainer(fit.parts(cfg, splits, {}), rt, tracker, Path(run_dir) / "ckpt")
        seconds: list[float] = []
        busy: list[float] = []
        epoch_of = made._train_epoch  # timed from outside: the Trainer itself is unchanged

        def timed(*args: object) -> float:
            if rt.device.type == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            with gpu_busy(rt.device) as samples:
                loss = epoch_of(*args)  # type: ignore[arg-type]
                if rt.device.type == "cuda":
                    torch.cuda.synchronize()
            seconds.append(time.perf_counter() - started)
            busy.extend(samples if len(seconds) > 1 else [])
            return loss

        made._train_epoch = timed  # type: ignore[method-assign]
        with GracefulStop() as stop:
            made.fit(splits, stop)
        tracker.close()
    return statistics.median(seconds[1:]), busy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--quick", action="store_true", help="a small dataset, for a smoke test")
    parser.add_argument("--compile", default="both", choices=["both", "no", "yes"])
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    parser.add_argument("--samples", type=int, default=0, help="default 40000 (quick: 256)")
    parser.add_argument("--batch-size", type=int, default=0, help="default 512 (quick: 64)")
    parser.add_argument(
        "--epochs", type=int, default=0, help="default 4 (quick: 2); the first is the warm-up"
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA GPU visible; --device cpu runs the same code on the CPU")
    count = args.samples or (256 if args.quick else 40_000)
    args.epochs = args.epochs or (2 if args.quick else 4)
    args.batch_size = args.batch_size or (64 if args.quick else 512)
    compiles = {"both": (False, True), "no": (False,), "yes": (True,)}[args.compile]
    rt = runtime.start(args.device)
    runtime.seed_everything(0, deterministic=False)  # as a run does: cuDNN picks its kernels
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as scratch:
        rng = np.random.default_rng(0)
        npz = Path(scratch) / "data.npz"
        np.savez(
            npz, x=rng.random((count, *SAMPLE), dtype=np.float32), y=rng.integers(0, 10, count)
        )
        prepare.prepare(str(npz), f"{scratch}/shards", shard_mb=16, **SPLIT)
        sources = {
            "in memory": data.load_splits(str(npz), *SPLIT.values()),
            "streamed": shards.load_splits(f"{scratch}/shards", 4, 4, f"{scratch}/cache", 10),
        }
        rows = []
        for source, splits in sources.items():
            for compiled in compiles:
                cfg = config(args.device, args.precision, compiled, args.batch_size, args.epochs)
                cfg.data.num_workers = 4 if source == "streamed" else 0  # type: ignore[attr-defined]
                base_s, base_busy = bare(cfg, splits, rt, compiled, args.epochs)
                ours_s, ours_busy = trainer(cfg, splits, rt, args.epochs)
                n = len(splits.train)
                rows.append((source, compiled, n / base_s, n / ours_s, base_busy, ours_busy))
    name = torch.cuda.get_device_name(rt.device) if rt.device.type == "cuda" else "CPU"
    print(
        f"\n{name}, torch {torch.__version__}, {args.precision}, CNN, batch {args.batch_size}, "
        f"{count} samples of {'x'.join(map(str, SAMPLE))}; medians of epochs 2-{args.epochs}"
    )
    print(
        f"{'data':<10} {'compile':<8} {'bare samples/s':>15} {'Trainer samples/s':>18} "
        f"{'Trainer/bare':>13} {'GPU busy bare':>14} {'GPU busy Trainer':>17}"
    )

    def share(samples: list[float]) -> str:
        return f"{statistics.mean(samples):.0f}%" if samples else "n/a"

    for source, compiled, base, ours, base_busy, ours_busy in rows:
        print(
            f"{source:<10} {'yes' if compiled else 'no':<8} {base:>15.0f} {ours:>18.0f} "
            f"{ours / base:>13.3f} {share(base_busy):>14} {share(ours_busy):>17}"
        )
    runtime.stop(rt)


if __name__ == "__main__":
    main()
