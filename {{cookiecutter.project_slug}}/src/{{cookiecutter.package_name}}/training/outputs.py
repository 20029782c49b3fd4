"""What a run leaves in its directory besides checkpoints (the resolved config, metrics.json), and
the lines both training loops print: each epoch, a resume, an early stop, the closing summary."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .storage import atomic_write

log = logging.getLogger(__name__)


def write_resolved_config(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Save the config with every interpolation resolved; return it as a plain dict."""
    resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    atomic_write(run_dir / "config.yaml", lambda tmp: tmp.write_text(OmegaConf.to_yaml(resolved)))
    return {str(key): value for key, value in resolved.items()}  # type: ignore[union-attr]


def write_metrics(metrics: dict[str, Any], run_dir: Path, name: str = "metrics.json") -> Path:
    path = run_dir / name
    text = json.dumps(metrics, indent=2, sort_keys=True) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text))
    return path


def show_progress_bar(setting: bool | None, is_main: bool) -> bool:
    """`trainer.progress_bar`: null shows a bar only on a terminal; only the main process shows."""
    on = sys.stderr.isatty() if setting is None else setting
    return on and is_main


def log_epoch(
    epoch: int, max_epochs: int, metrics: dict[str, Any], lr: float, seconds: float
) -> None:
    shown = "  ".join(f"{key} {value:.4f}" for key, value in metrics.items() if _is_float(value))
    log.info("epoch %d/%d  %s  lr %.2e  (%.1fs)", epoch, max_epochs, shown, lr, seconds)


def log_resumed(path: Path, epoch: int, batch: int, step: int) -> None:
    log.info("resumed from %s: epoch %d, batch %d, step %d", path, epoch, batch, step)


def log_early_stop(metric: str, patience: int) -> None:
    log.info("early stopping: %s has not improved for %d epochs", metric, patience)


def log_summary(title: str, metrics: dict[str, Any], paths: dict[str, Path | str]) -> None:
    """The few lines a person reads when a run ends."""
    width = max(len(key) for key in [*metrics, *paths])
    lines = [title]
    lines += [f"  {key:<{width}}  {_fmt(value)}" for key, value in metrics.items()]
    lines += [f"  {key:<{width}}  {value}" for key, value in paths.items()]
    log.info("\n".join(lines))


def _is_float(value: Any) -> bool:
    return isinstance(value, float)


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if _is_float(value) else str(value)
