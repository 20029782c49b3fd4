"""The end of a sweep (a Hydra grid, or an Optuna search): the best run, its overrides and its
metric, as the sweep's last lines. A Hydra callback (configs/hydra/default.yaml)."""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)


def direction(config: DictConfig, metric: str) -> str:
    """'max' or 'min' for `metric`: the sweeper's, else the callback's that monitors it."""
    sweeper = config.hydra.sweeper.get("direction")
    if isinstance(sweeper, str):
        return "max" if sweeper == "maximize" else "min"
    for monitor in (config.callbacks.checkpoint, config.callbacks.early_stopping):
        if monitor is not None and monitor.monitor == metric:
            return str(monitor.mode)
    return "min" if metric.endswith("loss") else "max"


def best_run(sweep_dir: Path, metric: str, mode: str) -> tuple[Path, dict[str, Any]] | None:
    """The job folder whose metrics.json holds the best `metric`, and those metrics."""
    scored = []
    for path in sorted(sweep_dir.glob("*/metrics.json")):
        metrics = json.loads(path.read_text())
        if isinstance(metrics.get(metric), int | float):
            scored.append((metrics[metric], path.parent, metrics))
    if not scored:
        return None
    best = (max if mode == "max" else min)(scored, key=lambda found: found[0])
    return best[1], best[2]


def quiet_optuna(config: DictConfig) -> None:
    """Optuna sets its own logger's level as it loads, after Hydra's logging config: apply the
    level configs/hydra/default.yaml gives it (hydra_logging.loggers.optuna) once more."""
    level = OmegaConf.select(config, "hydra.hydra_logging.loggers.optuna.level")
    if level and "optuna" in str(OmegaConf.select(config, "hydra.sweeper._target_")):
        optuna = importlib.import_module("optuna")
        optuna.logging.set_verbosity(logging.getLevelName(level))


class SweepSummary(Callback):
    """Names the best job of a sweep when it ends."""

    def __init__(self) -> None:
        self.sweep_dir: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.sweep_dir = Path(config.hydra.sweep.dir)  # resolved once: it holds the start time
        quiet_optuna(config)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        metric = config.get("optimized_metric")
        if self.sweep_dir is None or not metric:
            return
        mode = direction(config, metric)
        found = best_run(self.sweep_dir, metric, mode)
        if found is None:
            log.info("sweep finished: no job of %s reported %s", self.sweep_dir, metric)
            return
        run_dir, metrics = found
        overrides = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text()) or []
        jobs = len(list(self.sweep_dir.glob("*/metrics.json")))
        log.info(
            "sweep finished: best of %d runs by %s (%s)\n  %s  %.4f\n  run        %s\n"
            "  overrides  %s",
            jobs, metric, mode, metric, metrics[metric], run_dir, " ".join(overrides),
        )  # fmt: skip
