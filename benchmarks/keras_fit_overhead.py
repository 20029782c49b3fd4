"""Training-loop overhead, TensorFlow: the generated project's Keras `fit` against a bare
`tf.GradientTape` loop.

Both train the same MLP on the same digits split with the same batch size, optimizer and epochs,
and both validate after every epoch. The bare loop is what a person writes by hand: a shuffled
`tf.data` pipeline and a `tf.function`-compiled train step. The project's Trainer also does what
it exists for (resumable input order, metrics to metrics.jsonl, stop-signal checks, best and last
checkpoints). Each run builds a fresh model, so both pay their tracing once per run. The two
alternate for several rounds in one process so machine noise hits both alike; medians reported.

    python benchmarks/keras_fit_overhead.py [--epochs 30] [--rounds 5]

Run it with a Python that has the TensorFlow project's dependencies (`pip install -e ".[dev]"` in
a project baked with framework=tensorflow). Target: overhead under 5% on a CPU.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TEMPLATE_DIR))

from template_tools import bake, default_answers  # noqa: E402

ANSWERS = {"framework": "tensorflow", "tracking": "none"}
LR = 0.003


def load_project(workdir: Path) -> tuple[Path, str]:
    """Bake the TensorFlow project and put its package on the import path."""
    project = bake(TEMPLATE_DIR, workdir, ANSWERS)
    sys.path.insert(0, str(project / "src"))
    return project, default_answers(TEMPLATE_DIR, ANSWERS)["package_name"]


def bare_loop(model, splits, batch_size: int, epochs: int, seed: int) -> int:
    """tf.data shuffle + batch, a compiled GradientTape step, a compiled validation step."""
    import keras
    import tensorflow as tf

    train = (
        tf.data.Dataset.from_tensor_slices((splits.train.x, splits.train.y))
        .shuffle(len(splits.train), seed=seed, reshuffle_each_iteration=True)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )
    val = tf.data.Dataset.from_tensor_slices((splits.val.x, splits.val.y)).batch(batch_size)
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

    steps = 0
    for _ in range(epochs):
        for x, y in train:
            train_step(x, y)
            steps += 1
        totals = [val_step(x, y) for x, y in val]
        del totals  # computed each epoch, as fit's validation is
    return steps


def project_loop(project: Path, package: str, model, splits, batch_size: int, epochs: int) -> int:
    """The project's Trainer with its default settings (clipping off, like the bare loop;
    checkpoints, metrics and signal checks on)."""
    from omegaconf import OmegaConf

    loop = importlib.import_module(f"{package}.loop")
    runtime = importlib.import_module(f"{package}.runtime")
    schedules = importlib.import_module(f"{package}.schedules")
    schema = importlib.import_module(f"{package}.schema")
    signals = importlib.import_module(f"{package}.signals")
    tracking = importlib.import_module(f"{package}.tracking")
    configs = project / "configs"
    settings = OmegaConf.merge(
        OmegaConf.structured(schema.TrainerConfig),
        OmegaConf.load(configs / "trainer" / "default.yaml"),
        {"max_epochs": epochs, "device": "cpu", "gradient_clip_norm": None, "progress_bar": False},
    )
    callbacks = OmegaConf.merge(
        OmegaConf.structured(schema.CallbacksConfig),
        OmegaConf.load(configs / "callbacks" / "default.yaml"),
        {"early_stopping": None},
    )
    import keras
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as run_dir:
        tracker = tracking.start(Path(run_dir), {}, {}, enabled=True)
        trainer = loop.Trainer(
            make_model=lambda: model,
            make_optimizer=_partial(keras.optimizers.AdamW, lr=LR, weight_decay=0.01),
            make_scheduler=schedules.constant,
            settings=OmegaConf.to_object(settings),
            callbacks=OmegaConf.to_object(callbacks),
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
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    # Steadier figures; both loops get the same.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    with tempfile.TemporaryDirectory() as workdir:
        project, package = load_project(Path(workdir))
        data = importlib.import_module(f"{package}.data")
        mlp = importlib.import_module(f"{package}.models.mlp")
        splits = data.load_splits("builtin:digits", 0.15, 0.15, 1234)
        runs = {
            "bare GradientTape loop": lambda model: bare_loop(
                model, splits, args.batch_size, args.epochs, seed=0
            ),
            "project Keras fit": lambda model: project_loop(
                project, package, model, splits, args.batch_size, args.epochs
            ),
        }
        wall: dict[str, list[float]] = {name: [] for name in runs}
        for round_ in range(args.rounds + 1):  # round 0 warms up caches and allocators
            for name, run in runs.items():
                keras.utils.set_random_seed(0)
                model = mlp.MLP(splits.input_shape, splits.num_classes)
                started = time.perf_counter()
                steps = run(model)
                if round_ > 0:
                    wall[name].append(steps / (time.perf_counter() - started))

    bare = statistics.median(wall["bare GradientTape loop"])
    ours = statistics.median(wall["project Keras fit"])
    print(
        f"{args.epochs} epochs x {args.rounds} rounds (after one warm-up round), "
        f"batch {args.batch_size}, 1 CPU thread; whole runs, tracing included"
    )
    print(f"{'loop':<24} {'steps/s (median)':>17} {'min':>9} {'max':>9}")
    for name, values in wall.items():
        row = f"{name:<24} {statistics.median(values):>17.1f}"
        print(f"{row} {min(values):>9.1f} {max(values):>9.1f}")
    print(f"overhead: {100 * (1 - ours / bare):+.1f}% (target: under 5%)")


if __name__ == "__main__":
    main()
