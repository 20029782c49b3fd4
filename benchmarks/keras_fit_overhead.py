"""Training-loop overhead, TensorFlow: the generated project's Keras `fit` against a bare
`tf.GradientTape` loop.

All train the same MLP on the same digits split with the same batch size, optimizer and epochs,
and all validate after every epoch. The bare loop is what a person writes by hand: a
`tf.function`-compiled train step and validation step. It runs twice: on a hand-written shuffled
`tf.data` pipeline, and on the project's resumable pipeline (inputs.py), so loop overhead and
input-pipeline speed are told apart. The project's Trainer also does what it exists for (metrics
to metrics.jsonl, stop-signal checks, best and last checkpoints). Each run builds a fresh model,
so each pays its tracing once per run; the bare loop traces its train step twice, because its
optimizer creates variables in the first step (the project builds the optimizer before `fit`).
The loops alternate for several rounds in one process so machine noise hits all alike; the first
round is discarded, medians of wall time and of CPU time (every thread) reported. On a shared
machine the CPU figures are the ones to read: a bare loop's wall time can double when its
eager input pipeline waits on a busy core.

    invoke bench keras [-- --epochs 30 --rounds 5]

`invoke bench` bakes the TensorFlow project, installs it in a venv of its own and runs this
script with that venv's Python and `--project`. Target: overhead under 5% on a CPU.
"""

from __future__ import annotations

import argparse
import importlib
import math
import tempfile
from pathlib import Path

from overhead import load_project, print_table, timed_rounds, trainer_settings

LR = 0.003
OURS = "project Keras fit"


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
    inputs = importlib.import_module(f"{package}.inputs")
    return (
        inputs.train_dataset(splits.train, batch_size, seed, range(epochs)),
        inputs.eval_dataset(splits.val, batch_size),
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
    loop = importlib.import_module(f"{package}.loop")
    runtime = importlib.import_module(f"{package}.runtime")
    schedules = importlib.import_module(f"{package}.schedules")
    signals = importlib.import_module(f"{package}.signals")
    tracking = importlib.import_module(f"{package}.tracking")
    settings, callbacks = trainer_settings(project, package, epochs)
    import keras
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as run_dir:
        tracker = tracking.start(Path(run_dir), {}, {}, enabled=True)
        trainer = loop.Trainer(
            make_model=lambda: model,
            make_optimizer=_partial(keras.optimizers.AdamW, lr=LR, weight_decay=0.01),
            make_scheduler=schedules.constant,
            settings=settings,
            callbacks=callbacks,
            runtime=runtime.Runtime(tf.distribute.get_strategy(), "cpu"),
            tracker=tracker,
            checkpoint_dir=Path(run_dir) / "checkpoints",
            batch_size=batch_size,
            seed=0,
        )
        with signals.GracefulStop() as stop:
            trainer.fit(splits, stop)
        tracker.close()
        return trainer.progress.global_step


def _partial(func, **keywords):
    """What Hydra's instantiate gives for a `_partial_: true` config."""
    from functools import partial

    return partial(func, **keywords)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--project", type=Path, required=True, help="a baked project")
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    # Steadier figures; every loop gets the same.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    project = args.project.resolve()
    package = load_project(project)
    data = importlib.import_module(f"{package}.data")
    mlp = importlib.import_module(f"{package}.models.mlp")
    splits = data.load_splits("builtin:digits", 0.15, 0.15, 1234)
    steps_per_epoch = math.ceil(len(splits.train) / args.batch_size)
    batch, epochs = args.batch_size, args.epochs
    runs = {
        "bare loop, hand pipeline": lambda model: bare_loop(
            model, hand_pipeline(splits, batch, epochs, 0), steps_per_epoch, epochs
        ),
        "bare loop, project pipeline": lambda model: bare_loop(
            model, project_pipeline(package, splits, batch, epochs, 0), steps_per_epoch, epochs
        ),
        OURS: lambda model: project_loop(project, package, model, splits, batch, epochs),
    }

    def fresh_model():
        keras.utils.set_random_seed(0)
        return mlp.MLP(splits.input_shape, splits.num_classes)

    wall, cpu = timed_rounds(runs, fresh_model, args.rounds)

    print(
        f"{args.epochs} epochs x {args.rounds} rounds (after one warm-up round), batch "
        f"{args.batch_size}, 1 CPU thread; whole runs, tracing included; medians, overhead = "
        "Keras fit vs that loop"
    )
    print_table(wall, cpu, OURS)
    print(
        "target: overhead under 5% against the bare loop with the project pipeline (the loop "
        "alone). CPU-seconds count every thread and are steadier than wall time on a shared "
        "machine."
    )


if __name__ == "__main__":
    main()
