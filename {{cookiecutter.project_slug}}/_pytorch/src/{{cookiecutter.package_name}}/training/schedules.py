"""Learning-rate schedules, stepped once per optimizer step.

Each factory takes the optimizer and the run's total number of optimizer steps, which only the
loop knows; configs set the rest (`configs/scheduler/`).
"""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR


def warmup_cosine(
    optimizer: Optimizer,
    total_steps: int,
    warmup_fraction: float = 0.05,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Linear warmup from ~0 to the base LR, then cosine decay to `min_lr_ratio` x base LR."""
    warmup_steps = max(1, round(warmup_fraction * total_steps))

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return LambdaLR(optimizer, factor)


def constant(optimizer: Optimizer, total_steps: int) -> LambdaLR:
    """The base LR throughout."""
    del total_steps
    return LambdaLR(optimizer, lambda _step: 1.0)
