"""One training run in one run directory: build the parts from the config, train, test the best
checkpoint, write metrics.json. train.py runs one; crossval.py one per fold."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from ..data.splits import Splits
from ..tracking import exporter, trackers
from . import checkpoint, outputs, runtime, storage
from .contract import TrainerParts
from .loop import Trainer
from .signals import GracefulStop, StopRequested

log = logging.getLogger(__name__)
PACKAGE = __name__.split(".")[0]  # the Pushgateway's job: the project's package


def fit_and_test(
    cfg: DictConfig, rt: Any, splits: Splits, run_dir: Path, test: bool | None = None
) -> dict[str, Any]:
    """Train on the train split, early-stop on val, then test the best model on test (unless
    `test`, or the config's `test` when None, says not to)."""
    started = time.perf_counter()
    # A model that cannot take the data's samples says so now, before the run writes anything.
    getattr(get_class(cfg.model._target_), "check_input", lambda shape: None)(splits.input_shape)
    checkpoint_dir = run_dir / "checkpoints"
    # Rank k of a machine serves on monitoring.port + k (LOCAL_RANK where set, else the rank).
    local_rank = int(os.environ.get("LOCAL_RANK", rt.rank))
    metrics_live = exporter.start(
        cfg.monitoring, run_dir, rt.rank, local_rank, job=PACKAGE,
        checkpoint_interval_s=cfg.callbacks.checkpoint.min_interval_s,
    )  # fmt: skip
    try:  # the exporter is closed (its announcement removed) if the trackers cannot start
        runtime.seed_everything(cfg.seed, cfg.trainer.deterministic)
        config = outputs.write_resolved_config(cfg, run_dir) if rt.is_main else {}
        if rt.is_main and splits.preparation is not None:  # a table's, for evaluate and export
            splits.preparation.save(run_dir)
        log.info(
            "data %s: %d train / %d val / %d test, input %s, %d classes",
            cfg.data.source,
            len(splits.train),
            len(splits.val),
            len(splits.test),
            splits.input_shape,
            splits.num_classes,
        )
        chosen = {name: instantiate(factory) for name, factory in cfg.logger.items()}
        tracker = trackers.start(run_dir, config, chosen, enabled=rt.is_main, live=metrics_live)
    except BaseException:
        metrics_live.close(1)
        raise
    exit_code = 1  # anything but a clean finish marks the tracked run as failed
    try:
        trainer = Trainer(parts(cfg, splits, config), rt, tracker, checkpoint_dir)
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
        if (cfg.test if test is None else test) and rt.is_main:
            trainer.load_best_weights()
            metrics |= trainer.test(splits.test)
        metrics["epochs"] = trainer.epochs_done
        metrics["wall_time_s"] = round(time.perf_counter() - started, 2)
        metrics |= trainer.ran_on  # the device, precision and threads it actually trained with
        metrics |= metrics_live.throughput()  # steps and samples a second (invoke estimate)
        exit_code = 0
        if rt.is_main:
            tracker.summary(metrics)
            kept = tracker.where()
            tracker.close(exit_code)  # their own closing lines come before the run's summary
            _report(metrics, run_dir, checkpoint_dir, kept)
        return metrics
    except StopRequested as stopped:
        exit_code = stopped.exit_code
        log.warning("%s: %s", stopped, checkpoint_dir / checkpoint.LAST)
        raise SystemExit(exit_code) from None
    finally:
        tracker.close(exit_code)
        metrics_live.close(exit_code)


def parts(cfg: DictConfig, splits: Splits, config: dict[str, Any]) -> TrainerParts:
    """The factories and settings a Trainer is built from."""
    return TrainerParts(
        make_model=instantiate(
            cfg.model,
            _partial_=True,
            input_shape=splits.input_shape,
            num_classes=splits.num_classes,
        ),
        make_optimizer=instantiate(cfg.optimizer),
        make_scheduler=instantiate(cfg.scheduler),
        # Plain dataclasses: attribute reads in the training loop stay cheap.
        trainer=OmegaConf.to_object(cfg.trainer),  # type: ignore[arg-type]
        callbacks=OmegaConf.to_object(cfg.callbacks),  # type: ignore[arg-type]
        data=OmegaConf.to_object(cfg.data),  # type: ignore[arg-type]
        seed=cfg.seed,
        extra_state={
            "config": config,
            "input_shape": splits.input_shape,
            "num_classes": splits.num_classes,
            **({"preparation": splits.preparation.to_dict()} if splits.preparation else {}),
        },
    )


def _report(metrics: dict, run_dir: Path, checkpoint_dir: Path, kept: dict[str, str]) -> None:
    """metrics.json, then the run's summary: the last lines it prints."""
    metrics_path = outputs.write_metrics(metrics, run_dir)
    outputs.log_summary(
        "run finished",
        metrics,
        {
            "run directory": run_dir,
            "best checkpoint": checkpoint_dir / checkpoint.BEST,
            "metrics": metrics_path,
            **kept,
        },
    )


def _resume_checkpoint(cfg: DictConfig, checkpoint_dir: Path) -> Path | None:
    """An explicit `ckpt_path`, else this run directory's last checkpoint (local or mirrored)."""
    if cfg.ckpt_path:
        return storage.resolve(cfg.ckpt_path, checkpoint.LAST)
    last = checkpoint_dir / checkpoint.LAST
    storage.fetch_mirror(last, cfg.callbacks.checkpoint.mirror_uri)
    return last if last.exists() else None
