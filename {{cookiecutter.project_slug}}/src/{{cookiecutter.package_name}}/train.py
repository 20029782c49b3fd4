"""Train a model: `python -m PACKAGE.train [hydra overrides]`, on one device or several.

Reads top to bottom: check the command line, load the data, hand it to training/fit.py (which
builds the model, optimizer and tracker, trains, tests the best checkpoint and writes
metrics.json).
Re-running with the same `hydra.run.dir` resumes from that directory's last checkpoint.
"""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig

from .config import command
from .data.sources import load


def train(cfg: DictConfig) -> dict[str, Any]:
    """One training run in the Hydra run directory; returns validation and test metrics."""
    from .training.fit import fit_and_test  # the framework: once the command line is checked

    with command.job(cfg.trainer.device) as (rt, run_dir):
        splits = load(cfg.data)
        return fit_and_test(cfg, rt, splits, run_dir)


def main(cfg: DictConfig) -> float | None:
    metrics = train(cfg)
    # Sweepers (Optuna) optimize the value returned here.
    return metrics.get(cfg.optimized_metric) if cfg.optimized_metric else None


if __name__ == "__main__":
    command.run("train", main)
