"""Training-loop overhead, TensorFlow: the generated project's Keras `fit` against a bare
`tf.GradientTape` loop.

All train the same model on the same digits split with the same batch size, optimizer and
epochs, and all validate after every epoch. The bare loop is what a person writes by hand: a
`tf.function`-compiled train step and validation step. It runs twice: on a hand-written shuffled
`tf.data` pipeline, and on the project's resumable pipeline (batches.py), so loop overhead and
input-pipeline speed are told apart. Two cases: the tiny default (the MLP, batch 64), where the
per-step cost shows in microseconds per step, and a compute-bound one (the CNN, batch 512),
where the target is Keras fit's steps/s at least 0.98 of the bare loop's. The project's Trainer
also does what it exists for (metrics to metrics.jsonl, stop-signal checks, best and last
checkpoints). Each run builds a fresh model, so each pays its tracing once per run; the bare
loop traces its train step twice, because its optimizer creates variables in the first step
(the project builds the optimizer before `fit`).
The loops alternate for several rounds in one process so machine noise hits all alike; the first
round is discarded, medians of wall time and of CPU time (every thread) reported. On a shared
machine the CPU figures are the ones to read: a bare loop's wall time can double when its
eager input pipeline waits on a busy core.

    invoke bench keras [-- --rounds 5]

`invoke bench` bakes the TensorFlow project, installs it in a venv of its own and runs this
script with that venv's Python and `--project`.
"""

from __future__ import annotations

import argparse
import importlib
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from overhead import load_project, print_table, project_trainer, timed_rounds

LR = 0.003
OURS = "project Keras fit"
CASES = {  # name: (model, batch size, epochs)
    "tiny default": ("mlp", 64, 30),
    "compute-bound": ("cnn", 512, 30),
}


def hand_pipeline(splits, batch_size: int, epochs: int, seed: int) -> tuple:
    """The pipeline a person writes by hand: shuffle, batch, repeat for every epoch."""
    import tensorflow as tf

    train = (
        tf.data.Dataset.from_tensor_slices((splits.train.x, splits.train.y))
        .shuffle(len(splits.train), seed=seed, reshuffle_each_iteration=True)
        .batch(batch_size)
        .repeat(epochs)
        .prefetch(tf.data.AUTOTUNE)
    )
    val = tf.data.Dataset.from_tensor_slices((splits.val.x, splits.val.y)).batch(batch_size)
    return train, val


def project_pipeline(package: str, splits, batch_size: int, epochs: int, seed: int) -> tuple:
    """The project's resumable pipeline, to tell loop overhead from input-pipeline speed."""
    batches = importlib.import_module(f"{package}.data.batches")
    return (
        batches.train_dataset(splits.train, batch_size, seed, range(epochs)),
        batches.eval_dataset(splits.val, batch_size),
    )


def bare_loop(model, pipeline: tuple, steps_per_epoch: int, epochs: int) -> int:
    """A compiled GradientTape step over `steps_per_epoch` batches, then a compiled validation
    step over the validation set, `epochs` times."""
    import keras
    import tensorflow as tf

    train, val = pipeline
    optimizer = keras.optimizers.AdamW(LR, weight_decay=0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def val_step(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        logits = model(x, training=False)
        correct = tf.reduce_sum(tf.cast(tf.argmax(logits, 1) == y, tf.float32))
        return loss_fn(y, logits) * tf.cast(tf.shape(y)[0], tf.float32), correct

    batches = iter(train)
    for _ in range(epochs):
        for _ in range(steps_per_epoch):
            train_step(*next(batches))
        totals = [val_step(x, y) for x, y in val]
        del totals  # computed each epoch, as fit's validation is
    return steps_per_epoch * epochs


def project_loop(project: Path, package: str, model, splits, batch_size: int, epochs: int) -> int:
    """The project's Trainer with its default settings (clipping off, like the bare loop;
    checkpoints, metrics and signal checks on)."""
    runtime = importlib.import_module(f"{package}.training.runtime")
    schedules = importlib.import_module(f"{package}.training.schedules")
    signals = importlib.import_module(f"{package}.training.signals")
    import keras
    import tensorflow as tf

    parts = {
        "make_model": lambda: model,
        "make_optimizer": _partial(keras.optimizers.AdamW, lr=LR, weight_decay=0.01),
        "make_scheduler": schedules.constant,
    }
    with tempfile.TemporaryDirectory() as run_dir:
        rt = runtime.Runtime(tf.distribute.get_strategy(), "cpu")
        trainer, tracker = project_trainer(
            project, package, parts, rt, Path(run_dir), epochs, batch_size
        )
        with signals.GracefulStop() as stop:
            trainer.fit(splits, stop)
        tracker.close()
        return trainer.progress.global_step


def _partial(func, **keywords):
    """What Hydra's instantiate gives for a `_partial_: true` config."""
    from functools import partial

    return partial(func, **keywords)


def case_runs(
    project: Path, package: str, splits, batch: int, epochs: int, steps: int
) -> dict[str, Callable[[Any], int]]:
    """The three loops of one case, each a function of a fresh model."""
    return {
        "bare loop, hand pipeline": lambda model: bare_loop(
            model, hand_pipeline(splits, batch, epochs, 0), steps, epochs
        ),
        "bare loop, project pipeline": lambda model: bare_loop(
            model, project_pipeline(package, splits, batch, epochs, 0), steps, epochs
        ),
        OURS: lambda model: project_loop(project, package, model, splits, batch, epochs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=0, help="override every case's epochs")
    parser.add_argument("--project", type=Path, required=True, help="a baked project")
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    # Steadier figures; every loop gets the same.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    project = args.project.resolve()
    package = load_project(project)
    data = importlib.import_module(f"{package}.data.sources")
    splits = data.load_splits("builtin:digits", 0.15, 0.15, 1234)
    models = {
        "mlp": importlib.import_module(f"{package}.models.mlp").MLP,
        "cnn": importlib.import_module(f"{package}.models.cnn").SmallCNN,
    }
    for case, (model_name, batch, epochs) in CASES.items():
        epochs = args.epochs or epochs
        steps = math.ceil(len(splits.train) / batch)
        runs = case_runs(project, package, splits, batch, epochs, steps)

        def fresh_model(name: str = model_name):
            keras.utils.set_random_seed(0)
            return models[name](splits.input_shape, splits.num_classes)

        wall, cpu = timed_rounds(runs, fresh_model, args.rounds)
        print(
            f"\n{case}: {model_name}, batch {batch}, {epochs} epochs x {args.rounds} rounds "
            "(after one warm-up round), 1 CPU thread; whole runs, tracing included; medians; "
            "ours/it = Keras fit's speed / that loop's"
        )
        print_table(wall, cpu, OURS)
    print(
        "\ntargets: compute-bound ours/it at least 0.98 against the bare loop on the project "
        "pipeline (the loop alone); the tiny default's us/step added is the per-step cost. "
        "CPU-seconds count every thread and are steadier than wall time on a shared machine."
    )


if __name__ == "__main__":
    main()
