"""K-fold cross-validation: `python -m PACKAGE.crossval [folds=5] [train overrides]`.

Every fold is a full training run (early stopping, checkpoints, resume) in `fold_<i>/` of the run
directory, scored on the part of train+val it did not see. The test split is never touched.
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from . import outputs, runtime
from .data import kfold_splits
from .schema import register
from .train import fit_and_test, quiet_non_zero_ranks

log = logging.getLogger(__name__)


def crossval(cfg: DictConfig) -> dict[str, float]:
    rt = runtime.start(cfg.trainer.device)
    try:
        run_dir = Path(runtime.broadcast(HydraConfig.get().runtime.output_dir, rt))
        folds = kfold_splits(
            cfg.data.source,
            cfg.data.folds,
            cfg.data.val_fraction,
            cfg.data.test_fraction,
            cfg.data.split_seed,
        )
        scores = []
        for index, splits in enumerate(folds):
            log.info("fold %d/%d", index + 1, len(folds))
            fold = fit_and_test(cfg, rt, splits, run_dir / f"fold_{index}")
            scores.append({"accuracy": fold.get("test/accuracy"), "loss": fold.get("test/loss")})
    finally:
        runtime.stop(rt)
    if not rt.is_main:  # only rank 0 scores the held-out folds
        return {}
    summary: dict = {"folds": len(scores), "per_fold": scores}
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


@hydra.main(version_base="1.3", config_path="../../configs", config_name="crossval")
def main(cfg: DictConfig) -> float | None:
    summary = crossval(cfg)
    return summary.get(f"cv/{cfg.optimized_metric.split('/')[-1]}_mean")


if __name__ == "__main__":
    register()
    quiet_non_zero_ranks()
    main()
