"""Weights & Biases as a tracker (configs/logger/wandb.yaml): never a prompt, never a hang.

Online needs an API key (WANDB_API_KEY or `wandb login`) and a reachable server; without either,
the run logs offline and says how to upload it later with `wandb sync`.
"""

from __future__ import annotations

import hashlib
import logging
import netrc
import os
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

log = logging.getLogger(__name__)

MODES = ("online", "offline", "disabled")


class WandbTracker:
    def __init__(self, run: Any) -> None:
        self.run = run

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def summary(self, metrics: dict[str, Any]) -> None:
        self.run.summary.update(metrics)

    def finish(self, exit_code: int) -> None:
        self.run.finish(exit_code=exit_code)

    def where(self) -> dict[str, str]:
        """Where the run's record is: its page online, or the command that uploads it."""
        if self.run.settings.mode == "offline":
            return {"wandb": f"offline; upload with: wandb sync {self.run.dir.rsplit('/', 1)[0]}"}
        return {"wandb": self.run.url} if self.run.url else {}


def api_key_present() -> bool:
    """True when wandb can log in without prompting: an env key or a netrc entry for its host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def resolve_mode(requested: str) -> str:
    if requested not in MODES:
        raise ValueError(f"logger.wandb.mode={requested!r} is not one of {MODES}")
    if requested == "online" and not api_key_present():
        log.warning(
            "wandb: no API key (set WANDB_API_KEY or run `wandb login`); logging offline "
            "(the run's summary says how to upload it)"
        )
        return "offline"
    return requested


def run_id(run_dir: Path) -> str:
    """The wandb run's id. A cloud run's comes from its own id (RUN_ID, kept by every relaunch
    and resume of it): its run folder is the same fixed path on every VM and job. Elsewhere it
    comes from the run folder, so re-running the same folder (a resume) continues the same run."""
    source = os.environ.get("RUN_ID") or str(run_dir.resolve())
    return hashlib.sha1(source.encode()).hexdigest()[:16]


def start(
    run_dir: Path,
    config: dict[str, Any],
    mode: Literal["online", "offline", "disabled"] = "online",
    init_timeout: float = 60,
    silent: bool = True,
    **init: Any,
) -> WandbTracker:
    """Start a wandb run in `run_dir`; `init` holds the other wandb.init arguments."""
    import wandb

    chosen = resolve_mode(mode)
    init.setdefault("id", run_id(run_dir))
    settings = wandb.Settings(init_timeout=init_timeout, silent=silent)

    def begin(chosen_mode: str) -> Any:
        return wandb.init(
            dir=str(run_dir), config=config, mode=chosen_mode,  # type: ignore[arg-type]
            resume="allow", settings=settings,
            **init,
        )  # fmt: skip

    try:
        return WandbTracker(begin(chosen))
    except Exception as err:  # wandb raises several error types for a server it cannot reach
        if chosen != "online":
            raise
        log.warning("wandb: cannot reach the server (%s); logging offline instead", err)
        wandb.teardown()  # release the half-started online run and its id
        return WandbTracker(begin("offline"))
