"""Where metrics go: always a JSON-lines file in the run directory, optionally Weights & Biases.

Only the main process tracks; other ranks get a tracker that does nothing.
"""

from __future__ import annotations

import json
import logging
import netrc
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

log = logging.getLogger(__name__)

WANDB_MODES = ("online", "offline", "disabled")


class Tracker:
    """Fan metrics out to metrics.jsonl and, when configured, wandb."""

    def __init__(self, run_dir: Path, wandb_run: Any = None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.wandb_run = wandb_run
        self._jsonl = open(run_dir / "metrics.jsonl", "a") if enabled else None  # noqa: SIM115

    def log(self, metrics: dict[str, float], step: int) -> None:
        if not self.enabled:
            return
        self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self._jsonl.flush()
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=step)

    def summary(self, metrics: dict[str, Any]) -> None:
        """Final figures: shown in wandb's run summary."""
        if self.enabled and self.wandb_run is not None:
            self.wandb_run.summary.update(metrics)

    def close(self, exit_code: int = 0) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        if self.wandb_run is not None:
            self.wandb_run.finish(exit_code=exit_code)
            self.wandb_run = None


def wandb_api_key_present() -> bool:
    """True when wandb can log in without prompting: an env key or a netrc entry for its host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def resolve_wandb_mode(requested: str) -> str:
    """Online needs a key; without one fall back to offline rather than prompt or hang."""
    if requested not in WANDB_MODES:
        raise ValueError(f"logger.wandb.mode={requested!r} is not one of {WANDB_MODES}")
    if requested == "online" and not wandb_api_key_present():
        log.warning(
            "wandb: no API key (set WANDB_API_KEY or run `wandb login`); logging offline. "
            "Upload later with `wandb sync <run dir>/wandb/offline-run-*`."
        )
        return "offline"
    return requested


def start(
    run_dir: Path, config: dict[str, Any], wandb_cfg: dict[str, Any] | None, enabled: bool
) -> Tracker:
    """Open the run's trackers. `wandb_cfg` is `logger.wandb` from the config (None: no wandb)."""
    if not enabled or not wandb_cfg:
        return Tracker(run_dir, enabled=enabled)
    import wandb

    settings = dict(wandb_cfg)
    mode = resolve_wandb_mode(settings.pop("mode", "online"))
    run = wandb.init(
        dir=str(run_dir),
        config=config,
        mode=mode,
        # Resuming the same run directory continues the same wandb run.
        id=settings.pop("id", None) or _stable_run_id(run_dir),
        resume="allow",
        **settings,
    )
    return Tracker(run_dir, wandb_run=run, enabled=enabled)


def _stable_run_id(run_dir: Path) -> str:
    import hashlib

    return hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]
