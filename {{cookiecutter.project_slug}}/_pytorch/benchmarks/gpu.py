"""GPU throughput: the project's Trainer against a bare loop on the same loader, in bf16, with and
without torch.compile, on in-memory arrays and on streamed shards. One command, one table, a few
minutes on one NVIDIA GPU, after nothing but the project's own install (`invoke setup`):

    python benchmarks/gpu.py              # the first GPU; about 3 minutes
    python benchmarks/gpu.py --device cpu --quick --compile no --precision fp32  # tests, a CPU
    python benchmarks/gpu.py --json rows.json   # the rows as JSON too (the GPU check reads them)

Rows: samples per second over the epochs after the first (compilation and warm-up excluded),
the Trainer's rate as a share of the bare loop's, and the GPU's busy share over the timed epochs
(`nvidia-smi` sampled every 100 ms; "n/a" without one).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpu_common import (  # noqa: E402
    BusySampler,
    Row,
    alternate,
    arguments,
    config,
    print_table,
    sources,
    write_json,
)
from hydra.utils import instantiate  # noqa: E402

from {{ cookiecutter.package_name }}.data import batches  # noqa: E402
from {{ cookiecutter.package_name }}.data.sources import readers  # noqa: E402
from {{ cookiecutter.package_name }}.tracking import trackers  # noqa: E402
from {{ cookiecutter.package_name }}.training import fit, loop, runtime  # noqa: E402
from {{ cookiecutter.package_name }}.training.signals import GracefulStop  # noqa: E402


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed_epochs(run_epoch, epochs: int, device: torch.device) -> tuple[float, list[float]]:
    """Seconds per epoch (median of all but the first), and the busy samples of those epochs."""
    run_epoch(0)  # warm-up: compilation, cuDNN's autotuning, the allocator
    busy = BusySampler(device.type == "cuda", device.index or 0)
    busy.start()  # outside the timed spans, as for the Trainer
    seconds = []
    for epoch in range(1, epochs):
        synchronize(device)
        with busy.span():
            started = time.perf_counter()
            run_epoch(epoch)
            synchronize(device)
            seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), busy.stop()


def fresh_compiler() -> None:
    """Forget every compiled graph: each loop compiles its own, from the on-disk cache, and none
    meets the recompile limit (8 graphs per function per process) left by the others."""
    torch._dynamo.reset()


def bare(cfg, splits, rt, compiled: bool, epochs: int) -> tuple[float, list[float]]:
    """A hand-written loop over the project's loader: forward (bf16 autocast), backward, the
    configured clipping, AdamW, the configured LR schedule."""
    fresh_compiler()
    runtime.precision_name(None, rt.device, cfg.trainer.tf32)  # TF32 as the Trainer sets it
    model = instantiate(cfg.model, input_shape=splits.input_shape, num_classes=10).to(rt.device)
    layout = runtime.memory_format(model, rt.device)  # channels_last for a CNN, as the Trainer
    model.to(memory_format=layout)
    net = runtime.compiled(model) if compiled else model
    # fused on a GPU, as the Trainer makes it: the baseline is the best a person would write
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=rt.device.type == "cuda")
    pin = rt.device.type == "cuda"
    bf16 = cfg.trainer.precision == "bf16"
    loader = batches.make_loader(
        splits.train,
        cfg.data.batch_size,
        shuffle=True,
        seed=0,
        num_workers=readers(cfg.data.num_workers),
        pin_memory=pin,
    )

    # The same math as the Trainer's step: the configured clipping and LR schedule.
    clip, params = cfg.trainer.gradient_clip_norm, list(model.parameters())
    steps = -(-len(splits.train) // cfg.data.batch_size) * epochs
    scheduler = instantiate(cfg.scheduler)(optimizer, total_steps=steps)

    def run_epoch(epoch: int) -> None:
        batches.epoch_sampler(loader).set_epoch(epoch)
        for x, y in loader:
            x = x.to(rt.device, non_blocking=True, memory_format=layout)
            y = y.to(rt.device, non_blocking=True)
            with torch.autocast(rt.device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(params, clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()

    return timed_epochs(run_epoch, epochs, rt.device)


def trainer(cfg, splits, rt, epochs: int) -> tuple[float, list[float]]:
    """The project's Trainer, built as fit.py builds it; epochs timed one by one."""
    fresh_compiler()
    with tempfile.TemporaryDirectory() as run_dir:
        tracker = trackers.start(Path(run_dir), {}, {}, enabled=True)
        made = loop.Trainer(fit.parts(cfg, splits, {}), rt, tracker, Path(run_dir) / "ckpt")
        seconds: list[float] = []
        busy = BusySampler(rt.device.type == "cuda", rt.device.index or 0)
        epoch_of = made._train_epoch  # timed from outside: the Trainer itself is unchanged

        def timed(*args: object) -> float:
            synchronize(rt.device)
            with busy.span():
                started = time.perf_counter()
                loss = epoch_of(*args)  # type: ignore[arg-type]
                synchronize(rt.device)
                seconds.append(time.perf_counter() - started)
            busy.start()  # after the warm-up epoch, outside the timed spans
            return loss

        made._train_epoch = timed  # type: ignore[method-assign]
        with GracefulStop() as stop:
            made.fit(splits, stop)
        samples = busy.stop()
        tracker.close()
    return statistics.median(seconds[1:]), samples


def main() -> None:
    args = arguments(__doc__)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: no CUDA GPU visible; --device cpu runs the same code on the CPU")
    rt = runtime.start(args.device)
    runtime.seed_everything(0, deterministic=False)  # as a run does: cuDNN picks its kernels
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as scratch:
        for source, splits in sources(scratch, args.samples).items():
            for compiled in args.compiles:
                cfg = config(args, compiled)
                cfg.data.num_workers = "auto" if source == "streamed" else 0
                (base_s, base_busy), (ours_s, ours_busy) = alternate(
                    args.rounds,
                    lambda: bare(cfg, splits, rt, compiled, args.epochs),  # noqa: B023
                    lambda: trainer(cfg, splits, rt, args.epochs),  # noqa: B023
                )
                n = len(splits.train)
                rows.append((source, compiled, n / base_s, n / ours_s, base_busy, ours_busy))
    name = torch.cuda.get_device_name(rt.device) if rt.device.type == "cuda" else "CPU"
    title = f"{name}, torch {torch.__version__}"
    print_table(title, "compile", args, rows)
    if args.json:
        write_json(args.json, title, args, rows)
    runtime.stop(rt)


if __name__ == "__main__":
    main()
