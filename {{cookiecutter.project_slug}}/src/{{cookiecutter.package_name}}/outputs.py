"""What a run leaves in its directory besides checkpoints: the resolved config, metrics.json and
the closing summary."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from .storage import atomic_write

log = logging.getLogger(__name__)


def write_resolved_config(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Save the config with every interpolation resolved; return it as a plain dict."""
    resolved = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    atomic_write(run_dir / "config.yaml", lambda tmp: tmp.write_text(OmegaConf.to_yaml(resolved)))
    return resolved


def as_metrics(totals: Sequence[float], prefix: str) -> dict[str, float]:
    """`<prefix>/loss` and `<prefix>/accuracy` from summed (loss, correct, count) over a split."""
    loss_sum, correct, count = totals
    return {
        f"{prefix}/loss": loss_sum / max(count, 1),
        f"{prefix}/accuracy": correct / max(count, 1),
    }


def write_metrics(metrics: dict[str, Any], run_dir: Path, name: str = "metrics.json") -> Path:
    path = run_dir / name
    text = json.dumps(metrics, indent=2, sort_keys=True) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text))
    return path


def log_summary(title: str, metrics: dict[str, Any], paths: dict[str, Path | str]) -> None:
    """The few lines a person reads when a run ends."""
    width = max(len(key) for key in [*metrics, *paths])
    lines = [title]
    lines += [f"  {key:<{width}}  {_fmt(value)}" for key, value in metrics.items()]
    lines += [f"  {key:<{width}}  {value}" for key, value in paths.items()]
    log.info("\n".join(lines))


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
