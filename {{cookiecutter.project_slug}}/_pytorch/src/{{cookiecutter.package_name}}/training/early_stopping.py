"""Track the best value of a validation metric: drives early stopping and the best checkpoint."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class MetricMonitor:
    """Remembers the best value of `metric` and how many evaluations passed without improving."""

    metric: str
    mode: str = "min"
    min_delta: float = 0.0
    best: float | None = None
    best_epoch: int | None = None
    stale_evals: int = 0

    def __post_init__(self) -> None:
        self.mode = str(self.mode)  # a plain string in checkpoints, not the config's enum

    def update(self, metrics: dict[str, float], epoch: int) -> bool:
        """Record this evaluation; True when it is the new best."""
        if self.metric not in metrics:
            raise KeyError(f"monitored metric {self.metric!r} not in {sorted(metrics)}")
        value = metrics[self.metric]
        if math.isnan(value):
            improved = False
        elif self.best is None:
            improved = True
        elif self.mode == "min":
            improved = value < self.best - self.min_delta
        else:
            improved = value > self.best + self.min_delta
        if improved:
            self.best, self.best_epoch, self.stale_evals = value, epoch, 0
        else:
            self.stale_evals += 1
        return improved

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for key, value in state.items():
            setattr(self, key, value)


@dataclass
class EarlyStopping:
    """Stop when the monitored metric has not improved for `patience` evaluations."""

    monitor: MetricMonitor
    patience: int

    @property
    def should_stop(self) -> bool:
        return self.monitor.stale_evals >= self.patience

    @classmethod
    def configured(cls, stopping: Any) -> EarlyStopping | None:
        """From `callbacks.early_stopping` (monitor, mode, min_delta, patience); None if unset."""
        if not stopping:
            return None
        monitor = MetricMonitor(stopping.monitor, stopping.mode, stopping.min_delta)
        return cls(monitor, stopping.patience)
