"""GPU throughput: the project's Trainer (Keras fit) against a bare GradientTape loop on the same
tf.data pipeline, in bf16 (mixed_bfloat16), with and without XLA, on in-memory arrays and on
streamed shards. One command, one table, a few minutes on one NVIDIA GPU, after nothing but the
project's own install (`invoke setup`):

    python benchmarks/gpu.py              # the first GPU; about 3 minutes
    python benchmarks/gpu.py --device cpu --quick --compile no --precision fp32  # tests, a CPU

Rows: samples per second over the epochs after the first (tracing, XLA compilation and warm-up
excluded), the Trainer's rate as a share of the bare loop's, and the GPU's busy share over the
timed epochs (`nvidia-smi` sampled every 100 ms; "n/a" without one).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as the package sets it: before TF loads

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.utils import instantiate  # noqa: E402

from {{ cookiecutter.package_name }} import batches, data, fit, loop, prepare, runtime, shards, tracking  # noqa: E402
from {{ cookiecutter.package_name }}.schema import register  # noqa: E402
from {{ cookiecutter.package_name }}.signals import GracefulStop  # noqa: E402

SAMPLE = (3, 32, 32)
SPLIT = {"val_fraction": 0.02, "test_fraction": 0.02, "split_seed": 1234}


@contextlib.contextmanager
def gpu_busy(on_gpu: bool) -> Iterator[list[float]]:
    """Samples of the first GPU's utilization (%) while the block runs; none on a CPU."""
    samples: list[float] = []
    if not on_gpu or shutil.which("nvidia-smi") is None:
        yield samples
        return
    query = [
        "nvidia-smi",
        "--id=0",
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


def bare(cfg, splits, compiled: bool, epochs: int, on_gpu: bool) -> tuple[float, list[float]]:
    """A hand-written compiled GradientTape step over the project's pipeline, AdamW."""
    keras.config.set_dtype_policy(
        runtime.dtype_policy(cfg.trainer.precision, "gpu" if on_gpu else "cpu")
    )
    model = instantiate(cfg.model, input_shape=splits.input_shape, num_classes=10)
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=compiled)
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, tf.cast(model(x, training=True), tf.float32))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    seconds, busy = [], []
    for epoch in range(epochs):
        stream = batches.train_dataset(
            splits.train, cfg.data.batch_size, 0, range(epoch, epoch + 1)
        )
        with gpu_busy(on_gpu and epoch > 0) as samples:
            started = time.perf_counter()
            loss = None
            for x, y in stream:
                loss = step(x, y)
            float(loss)  # type: ignore[arg-type]  # wait for the last step
            seconds.append(time.perf_counter() - started)
        busy += samples
    return statistics.median(seconds[1:]), busy


class EpochTimes(keras.callbacks.Callback):
    def __init__(self, on_gpu: bool) -> None:
        super().__init__()
        self.on_gpu, self.seconds, self.busy = on_gpu, [], []
        self._busy: contextlib.ExitStack | None = None

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._busy = contextlib.ExitStack()
        self._samples = self._busy.enter_context(gpu_busy(self.on_gpu and bool(self.seconds)))
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.seconds.append(time.perf_counter() - self._started)  # before validation's time
        assert self._busy is not None
        self._busy.close()
        self.busy += self._samples


def trainer(cfg, splits, rt, on_gpu: bool) -> tuple[float, list[float]]:
    """The project's Trainer, built as fit.py builds it; epochs timed by a callback added first
    (its epoch ends before the project's validation runs)."""
    timer = EpochTimes(on_gpu)
    with tempfile.TemporaryDirectory() as run_dir:
        tracker = tracking.start(Path(run_dir), {}, {}, enabled=True)
        made = loop.Trainer(fit.parts(cfg, splits, {}), rt, tracker, Path(run_dir) / "ckpt")
        callbacks_of = made._callbacks

        def with_timer(*args: object) -> tuple:
            callbacks, backup = callbacks_of(*args)  # type: ignore[arg-type]
            return [timer, *callbacks], backup

        made._callbacks = with_timer  # type: ignore[method-assign]
        with GracefulStop() as stop:
            made.fit(splits, stop)
        tracker.close()
    return statistics.median(timer.seconds[1:]), timer.busy


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
    on_gpu = args.device == "cuda"
    if on_gpu and not tf.config.list_physical_devices("GPU"):
        raise SystemExit(
            "error: TensorFlow sees no GPU; --device cpu runs the same code on the CPU"
        )
    count = args.samples or (256 if args.quick else 40_000)
    args.epochs = args.epochs or (2 if args.quick else 4)
    args.batch_size = args.batch_size or (64 if args.quick else 512)
    compiles = {"both": (False, True), "no": (False,), "yes": (True,)}[args.compile]
    rt = runtime.start(args.device)
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
                base_s, base_busy = bare(cfg, splits, compiled, args.epochs, on_gpu)
                ours_s, ours_busy = trainer(cfg, splits, rt, on_gpu)
                n = len(splits.train)
                rows.append((source, compiled, n / base_s, n / ours_s, base_busy, ours_busy))
    gpus = tf.config.list_physical_devices("GPU")
    name = (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        if on_gpu
        else "CPU"
    )
    print(
        f"\n{name}, TensorFlow {tf.__version__}, {args.precision}, CNN, batch {args.batch_size}, "
        f"{count} samples of {'x'.join(map(str, SAMPLE))}; medians of epochs 2-{args.epochs}"
    )
    print(
        f"{'data':<10} {'XLA':<8} {'bare samples/s':>15} {'Trainer samples/s':>18} "
        f"{'Trainer/bare':>13} {'GPU busy bare':>14} {'GPU busy Trainer':>17}"
    )

    def share(samples: list[float]) -> str:
        return f"{statistics.mean(samples):.0f}%" if samples else "n/a"

    for source, compiled, base, ours, base_busy, ours_busy in rows:
        print(
            f"{source:<10} {'yes' if compiled else 'no':<8} {base:>15.0f} {ours:>18.0f} "
            f"{ours / base:>13.3f} {share(base_busy):>14} {share(ours_busy):>17}"
        )


if __name__ == "__main__":
    main()
