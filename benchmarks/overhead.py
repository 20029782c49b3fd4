"""What the training-loop benchmarks share: the baked project's package, its Trainer built as
fit.py builds it, the alternating timed rounds and the table. Each benchmark brings its loops."""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

Rates = dict[str, list[float]]


def load_project(project: Path) -> str:
    """Put a baked project's package on the import path; return the package's name."""
    package = next(init.parent for init in (project / "src").glob("*/__init__.py"))
    sys.path.insert(0, str(package.parent))
    return package.name


def trainer_settings(project: Path, package: str, epochs: int) -> tuple[Any, Any]:
    """The project's own trainer and callbacks defaults, minus what the bare loops do not do
    either (clipping, early stopping, the progress bar), as the typed config objects."""
    from omegaconf import OmegaConf

    schema = importlib.import_module(f"{package}.config.schema")
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
    return OmegaConf.to_object(settings), OmegaConf.to_object(callbacks)


def data_settings(project: Path, package: str, **values: Any) -> Any:
    """configs/data/_defaults.yaml as the typed config object, with `values` set."""
    from omegaconf import OmegaConf

    schema = importlib.import_module(f"{package}.config.schema")
    merged = OmegaConf.merge(
        OmegaConf.structured(schema.DataConfig),
        OmegaConf.load(project / "configs" / "data" / "_defaults.yaml"),
        {"source": "builtin:digits", **values},
    )
    return OmegaConf.to_object(merged)


def project_trainer(
    project: Path,
    package: str,
    parts: dict[str, Any],
    runtime: Any,
    run_dir: Path,
    epochs: int,
    batch_size: int,
    seed: int = 0,
) -> tuple[Any, Any]:
    """The project's Trainer and its tracker, from `parts` (make_model, make_optimizer,
    make_scheduler) and the project's own settings, as fit.py builds it."""
    contract = importlib.import_module(f"{package}.training.contract")
    loop = importlib.import_module(f"{package}.training.loop")
    tracking = importlib.import_module(f"{package}.tracking.trackers")
    settings, callbacks = trainer_settings(project, package, epochs)
    trainer_parts = contract.TrainerParts(
        **parts,
        trainer=settings,
        callbacks=callbacks,
        data=data_settings(project, package, batch_size=batch_size),
        seed=seed,
        extra_state={},
    )
    tracker = tracking.start(run_dir, {}, {}, enabled=True)
    return loop.Trainer(trainer_parts, runtime, tracker, run_dir / "checkpoints"), tracker


def timed_rounds(
    runs: dict[str, Callable[[Any], int]], fresh_model: Callable[[], Any], rounds: int
) -> tuple[Rates, Rates]:
    """Steps per wall second and per CPU second of each run, the runs alternating round by
    round so machine noise hits all alike; round 0 warms caches and allocators and is dropped."""
    wall: Rates = {name: [] for name in runs}
    cpu: Rates = {name: [] for name in runs}
    for round_ in range(rounds + 1):
        for name, run in runs.items():
            model = fresh_model()
            started, started_cpu = time.perf_counter(), time.process_time()
            steps = run(model)
            if round_ > 0:
                wall[name].append(steps / (time.perf_counter() - started))
                cpu[name].append(steps / (time.process_time() - started_cpu))
    return wall, cpu


def print_table(wall: Rates, cpu: Rates, ours: str) -> None:
    """Medians; the speed of `ours` as a share of each other run's, and the time it adds per
    step (microseconds, from the CPU-time medians)."""
    width = max(len(name) for name in wall) + 2
    print(
        f"{'loop':<{width}} {'steps/s':>8} {'ours/it':>8} {'steps/CPU-s':>12} {'ours/it':>8} "
        f"{'us/step added':>14}"
    )
    medians = {kind: {n: statistics.median(r) for n, r in rates.items()}
               for kind, rates in (("wall", wall), ("cpu", cpu))}  # fmt: skip
    for name in wall:
        row = f"{name:<{width}}"
        for kind, column in (("wall", 8), ("cpu", 12)):
            median = medians[kind][name]
            share = "" if name == ours else f"{medians[kind][ours] / median:.3f}"
            row += f" {median:>{column}.1f} {share:>8}"
        cpu_ours, cpu_it = medians["cpu"][ours], medians["cpu"][name]
        added = "" if name == ours else f"{1e6 * (1 / cpu_ours - 1 / cpu_it):+.1f}"
        print(f"{row} {added:>14}")
