"""Train a model: `python -m PACKAGE.train [hydra overrides]`, on one device or several.

Reads top to bottom: compose the config, build data, model, optimizer and tracker from it, hand
them to the loop, test the best checkpoint, write metrics.json. Re-running with the same
`hydra.run.dir` resumes from that directory's last checkpoint.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from . import checkpoint, outputs, runtime, storage, tracking
from .data import Splits, load_splits
from .loop import Trainer
from .schema import register
from .signals import GracefulStop, StopRequested

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, float]:
    """One training run in the Hydra run directory; returns validation and test metrics."""
    rt = runtime.start(cfg.trainer.device)
    try:
        # In a job of several processes only the first picks the run directory; all use it.
        run_dir = Path(runtime.broadcast(HydraConfig.get().runtime.output_dir, rt))
        splits = load_splits(
            cfg.data.source, cfg.data.val_fraction, cfg.data.test_fraction, cfg.data.split_seed
        )
        return fit_and_test(cfg, rt, splits, run_dir)
    finally:
        runtime.stop(rt)


def fit_and_test(
    cfg: DictConfig, rt: runtime.Runtime, splits: Splits, run_dir: Path
) -> dict[str, float]:
    """Train on the train split, early-stop on val, then test the best model on test."""
    started = time.perf_counter()
    checkpoint_dir = run_dir / "checkpoints"
    runtime.seed_everything(cfg.seed, cfg.trainer.deterministic)
    config = outputs.write_resolved_config(cfg, run_dir) if rt.is_main else {}
    log.info(
        "data %s: %d train / %d val / %d test, input %s, %d classes",
        cfg.data.source,
        len(splits.train),
        len(splits.val),
        len(splits.test),
        splits.input_shape,
        splits.num_classes,
    )
    trackers = {name: instantiate(factory) for name, factory in cfg.logger.items()}
    tracker = tracking.start(run_dir, config, trackers, enabled=rt.is_main)
    exit_code = 1  # anything but a clean finish marks the tracked run as failed
    try:
        trainer = Trainer(
            make_model=instantiate(
                cfg.model,
                _partial_=True,
                input_shape=splits.input_shape,
                num_classes=splits.num_classes,
            ),
            make_optimizer=instantiate(cfg.optimizer),
            make_scheduler=instantiate(cfg.scheduler),
            settings=OmegaConf.to_object(cfg.trainer),
            callbacks=OmegaConf.to_object(cfg.callbacks),
            runtime=rt,
            tracker=tracker,
            checkpoint_dir=checkpoint_dir,
            batch_size=cfg.data.batch_size,
            seed=cfg.seed,
            num_workers=cfg.data.num_workers,
            extra_state={
                "config": config,
                "input_shape": splits.input_shape,
                "num_classes": splits.num_classes,
            },
        )
        log.info(
            "model %s: %s parameters on %s",
            cfg.model._target_,
            f"{trainer.parameter_count:,}",
            rt.device,
        )
        resume_from = runtime.broadcast(
            _resume_checkpoint(cfg, checkpoint_dir) if rt.is_main else None, rt
        )
        with GracefulStop() as stop:
            metrics = trainer.fit(splits, stop, resume_from)
        if cfg.test and rt.is_main:
            trainer.load_best_weights()
            metrics |= trainer.test(splits.test)
        metrics["epochs"] = trainer.progress.epoch
        metrics["wall_time_s"] = round(time.perf_counter() - started, 2)
        if rt.is_main:
            tracker.summary(metrics)
            _report(metrics, run_dir, checkpoint_dir)
        exit_code = 0
        return metrics
    except StopRequested as stopped:
        exit_code = stopped.exit_code
        log.warning("%s: %s", stopped, checkpoint_dir / checkpoint.LAST)
        raise SystemExit(exit_code) from None
    finally:
        tracker.close(exit_code)


def _report(metrics: dict, run_dir: Path, checkpoint_dir: Path) -> None:
    metrics_path = outputs.write_metrics(metrics, run_dir)
    outputs.log_summary(
        "run finished",
        metrics,
        {
            "run directory": run_dir,
            "best checkpoint": checkpoint_dir / checkpoint.BEST,
            "metrics": metrics_path,
        },
    )


def _resume_checkpoint(cfg: DictConfig, checkpoint_dir: Path) -> Path | None:
    """An explicit `ckpt_path`, else this run directory's last checkpoint (local or mirrored)."""
    if cfg.ckpt_path:
        return storage.resolve(cfg.ckpt_path, checkpoint.LAST)
    last = checkpoint_dir / checkpoint.LAST
    storage.fetch_mirror(last, cfg.callbacks.checkpoint.mirror_uri)
    return last if last.exists() else None


def quiet_non_zero_ranks() -> None:
    """Processes other than the first of a job write nothing of their own: no Hydra output
    folder, no log file."""
    if runtime.process_rank() == 0:
        return
    sys.argv += ["hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none"]
    if not any(arg.startswith("hydra.run.dir=") for arg in sys.argv):
        # Rank 0 picks the timestamped folder; don't create a second one a second later.
        sys.argv.append(f"hydra.run.dir={tempfile.gettempdir()}")


@hydra.main(version_base="1.3", config_path="../../configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    metrics = train(cfg)
    # Sweepers (Optuna) optimize the value returned here.
    return metrics.get(cfg.optimized_metric) if cfg.optimized_metric else None


if __name__ == "__main__":
    register()
    quiet_non_zero_ranks()
    main()
