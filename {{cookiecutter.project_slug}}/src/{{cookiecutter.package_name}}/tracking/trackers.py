"""Where metrics go: always metrics.jsonl in the run directory, plus the trackers in `logger`.

Each entry of the `logger` config group is a `_target_` factory (see configs/logger/) called with
the run directory and the resolved config; it returns an object with `log(metrics, step)`,
`summary(metrics)`, `finish(exit_code)` and `where()`. Only the main process tracks.

Every process also hands what it logs to its live metrics (live.py: Prometheus, when
`monitoring=prometheus`), which the loops reach as `tracker.live` for their per-batch counts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from .live import NoLiveMetrics


def as_metrics(totals: Sequence[float], prefix: str) -> dict[str, float]:
    """`<prefix>/loss` and `<prefix>/accuracy` from summed (loss, correct, count) over a split."""
    loss_sum, correct, count = totals
    return {
        f"{prefix}/loss": loss_sum / max(count, 1),
        f"{prefix}/accuracy": correct / max(count, 1),
    }


class ExternalTracker(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...
    def summary(self, metrics: dict[str, Any]) -> None: ...
    def finish(self, exit_code: int) -> None: ...
    def where(self) -> dict[str, str]:
        """Name -> where this tracker keeps the run (a URL, a folder), for the run's summary."""
        ...


class Tracker:
    """Fan metrics out to metrics.jsonl and every configured tracker."""

    def __init__(
        self,
        run_dir: Path,
        trackers: list[ExternalTracker],
        enabled: bool,
        live: NoLiveMetrics | None = None,
    ) -> None:
        self.enabled = enabled
        self.trackers = trackers
        self.live = live or NoLiveMetrics()
        self._jsonl = open(run_dir / "metrics.jsonl", "a") if enabled else None  # noqa: SIM115

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.live.observe(metrics)
        if not self.enabled:
            return
        assert self._jsonl is not None, "log() after close()"
        self._jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self._jsonl.flush()
        for tracker in self.trackers:
            tracker.log(metrics, step)

    def summary(self, metrics: dict[str, Any]) -> None:
        """Final figures of the run."""
        self.live.observe(metrics)
        for tracker in self.trackers:
            tracker.summary(metrics)

    def where(self) -> dict[str, str]:
        """Where every tracker keeps the run, for the run's summary."""
        found: dict[str, str] = {}
        for tracker in self.trackers:
            found |= tracker.where()
        return found

    def close(self, exit_code: int = 0) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
            self._jsonl = None
        for tracker in self.trackers:
            tracker.finish(exit_code)
        self.trackers = []


def start(
    run_dir: Path,
    config: dict[str, Any],
    factories: Mapping[str, Callable[..., ExternalTracker]],
    enabled: bool,
    live: NoLiveMetrics | None = None,
) -> Tracker:
    """Open metrics.jsonl and start each tracker (none on ranks other than 0)."""
    trackers = (
        [make(run_dir=run_dir, config=config) for make in factories.values()] if enabled else []
    )
    return Tracker(run_dir, trackers, enabled, live)
