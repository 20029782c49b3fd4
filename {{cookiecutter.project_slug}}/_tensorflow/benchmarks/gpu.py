"""GPU throughput: the project's Trainer (Keras fit) against a bare GradientTape loop on the same
tf.data pipeline, in bf16 (mixed_bfloat16), with and without XLA, on in-memory arrays and on
streamed shards. One command, one table, a few minutes on one NVIDIA GPU, after nothing but the
project's own install (`invoke setup`):

    python benchmarks/gpu.py              # the first GPU; about 3 minutes
    python benchmarks/gpu.py --device cpu --quick --compile no --precision fp32  # tests, a CPU
    python benchmarks/gpu.py --json rows.json   # the rows as JSON too (the GPU check reads them)

Rows: samples per second over the epochs after the first (tracing, XLA compilation and warm-up
excluded), the Trainer's rate as a share of the bare loop's, and the GPU's busy share over the
timed epochs (`nvidia-smi` sampled every 100 ms; "n/a" without one).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # as the package sets it: before TF loads

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
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
from {{ cookiecutter.package_name }}.tracking import trackers  # noqa: E402
from {{ cookiecutter.package_name }}.training import fit, loop, runtime  # noqa: E402
from {{ cookiecutter.package_name }}.training.signals import GracefulStop  # noqa: E402


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

    seconds, busy = [], BusySampler(on_gpu)
    for epoch in range(epochs):
        stream = batches.train_dataset(
            splits.train, cfg.data.batch_size, 0, range(epoch, epoch + 1)
        )
        with busy.span():
            started = time.perf_counter()
            loss = None
            for x, y in stream:
                loss = step(x, y)
            float(loss)  # type: ignore[arg-type]  # wait for the last step
            seconds.append(time.perf_counter() - started)
        busy.start()  # after the warm-up epoch, outside the timed spans
    return statistics.median(seconds[1:]), busy.stop()


class EpochTimes(keras.callbacks.Callback):
    def __init__(self, on_gpu: bool) -> None:
        super().__init__()
        self.seconds: list[float] = []
        self.busy = BusySampler(on_gpu)

    def on_epoch_begin(self, epoch: int, logs: dict | None = None) -> None:
        self._began = time.time()
        self._started = time.perf_counter()

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        self.seconds.append(time.perf_counter() - self._started)  # before validation's time
        self.busy.spans.append((self._began, time.time()))
        self.busy.start()  # after the warm-up epoch, outside the timed spans, as in bare()


def trainer(cfg, splits, rt, on_gpu: bool) -> tuple[float, list[float]]:
    """The project's Trainer, built as fit.py builds it; epochs timed by a callback added first
    (its epoch ends before the project's validation runs)."""
    timer = EpochTimes(on_gpu)
    with tempfile.TemporaryDirectory() as run_dir:
        tracker = trackers.start(Path(run_dir), {}, {}, enabled=True)
        made = loop.Trainer(fit.parts(cfg, splits, {}), rt, tracker, Path(run_dir) / "ckpt")
        callbacks_of = made._callbacks

        def with_timer(*args: object) -> tuple:
            callbacks, backup = callbacks_of(*args)  # type: ignore[arg-type]
            return [timer, *callbacks], backup

        made._callbacks = with_timer  # type: ignore[method-assign]
        with GracefulStop() as stop:
            made.fit(splits, stop)
        samples = timer.busy.stop()
        tracker.close()
    return statistics.median(timer.seconds[1:]), samples


def main() -> None:
    args = arguments(__doc__)
    on_gpu = args.device == "cuda"
    gpus = tf.config.list_physical_devices("GPU")
    if on_gpu and not gpus:
        raise SystemExit("error: TensorFlow sees no GPU; --device cpu runs the same code on a CPU")
    rt = runtime.start(args.device)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as scratch:
        for source, splits in sources(scratch, args.samples).items():
            for compiled in args.compiles:
                cfg = config(args, compiled)
                (base_s, base_busy), (ours_s, ours_busy) = alternate(
                    args.rounds,
                    lambda: bare(cfg, splits, compiled, args.epochs, on_gpu),  # noqa: B023
                    lambda: trainer(cfg, splits, rt, on_gpu),  # noqa: B023
                )
                n = len(splits.train)
                rows.append((source, compiled, n / base_s, n / ours_s, base_busy, ours_busy))
    details = tf.config.experimental.get_device_details(gpus[0]) if on_gpu else {}
    name = details.get("device_name", "GPU") if on_gpu else "CPU"
    title = f"{name}, TensorFlow {tf.__version__}"
    print_table(title, "XLA", args, rows)
    if args.json:
        write_json(args.json, title, args, rows)


if __name__ == "__main__":
    main()
