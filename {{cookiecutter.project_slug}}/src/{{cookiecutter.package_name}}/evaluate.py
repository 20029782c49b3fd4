"""Score a checkpoint: `python -m PACKAGE.evaluate ckpt_path=RUN_DIR_OR_FILE [split=test]`.

The checkpoint carries the model and data config it was trained with, so evaluation rebuilds the
same model and the same split without repeating any training overrides.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from .config import command
from .config.schema import SplitName
from .data.preparation import Preparation
from .data.sources import load
from .training import outputs, storage

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Score the checkpoint at `cfg.ckpt_path` on one split; writes metrics.json."""
    # The framework: once the command line is checked.
    from .training import checkpoint
    from .training.scoring import evaluate_split, load_trained

    split = SplitName(cfg.split).value
    path = storage.resolve(cfg.ckpt_path, checkpoint.BEST)
    state = checkpoint.load(path)
    trained = OmegaConf.create(state["config"])
    model = load_trained(trained.model, path, state, cfg.device)
    data = trained.data
    if cfg.data_source:
        data.source = cfg.data_source
    source = data.source
    # A table is prepared as in training (its saved fill values, scaling and categories).
    saved = state.get("preparation")
    splits = load(data, Preparation.from_dict(saved) if saved else None)
    metrics = evaluate_split(model, getattr(splits, split), cfg.batch_size, split)
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    outputs.log_summary(
        f"evaluated {path} on {source} ({split})",
        metrics,
        {"metrics": outputs.write_metrics(metrics, run_dir)},
    )
    return metrics


def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    command.run("evaluate", main)
