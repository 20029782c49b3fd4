"""K-fold cross-validation: `python -m PACKAGE.crossval [data.folds=5] [train overrides]`.

Every fold is a full training run (early stopping, checkpoints, resume) in `fold_<i>/` of the run
directory, scored on the part of train+val it did not see. The test split is never touched.
"""

from __future__ import annotations

import logging
import statistics
from typing import Any

from omegaconf import DictConfig

from .config import command
from .data.sources import kfold_splits, table_options
from .training import outputs

log = logging.getLogger(__name__)


def crossval(cfg: DictConfig) -> dict[str, Any]:
    from .training.fit import fit_and_test  # the framework: once the command line is checked

    with command.job(cfg.trainer.device) as (rt, run_dir):
        folds = kfold_splits(
            cfg.data.source,
            cfg.data.folds,
            cfg.data.val_fraction,
            cfg.data.test_fraction,
            cfg.data.split_seed,
            **table_options(cfg.data),
        )
        scores = []
        for index, splits in enumerate(folds):
            folder = run_dir / f"fold_{index}"
            log.info("fold %d of %d, in %s", index + 1, len(folds), folder.name)
            # Each fold is scored on its held-out part, whatever `test` says.
            fold = fit_and_test(cfg, rt, splits, folder, test=True)
            scores.append({"accuracy": fold["test/accuracy"], "loss": fold["test/loss"]})
    if not rt.is_main:  # only rank 0 scores the held-out folds
        return {}
    summary: dict[str, Any] = {"folds": len(scores), "per_fold": scores}
    for key in ("accuracy", "loss"):
        values = [fold[key] for fold in scores]
        summary[f"cv/{key}_mean"] = statistics.fmean(values)
        summary[f"cv/{key}_std"] = statistics.stdev(values)
    outputs.log_summary(
        f"{len(scores)}-fold cross-validation",
        {key: value for key, value in summary.items() if key.startswith("cv/")},
        {"results": outputs.write_metrics(summary, run_dir, "crossval.json")},
    )
    return summary


def main(cfg: DictConfig) -> float | None:
    summary = crossval(cfg)
    if not cfg.optimized_metric:
        return None
    # val/accuracy -> cv/accuracy_mean: each fold's held-out score stands in for val and test.
    return summary.get(f"cv/{cfg.optimized_metric.split('/')[-1]}_mean")


if __name__ == "__main__":
    command.run("crossval", main)
