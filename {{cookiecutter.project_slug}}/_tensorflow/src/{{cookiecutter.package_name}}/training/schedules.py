"""Learning-rate schedules, stepped once per optimizer step.

Each factory takes the peak learning rate (`optimizer.lr`) and the run's total number of optimizer
steps, which only the trainer knows; configs set the rest (`configs/scheduler/`).
"""

from __future__ import annotations

import keras


def warmup_cosine(
    base_lr: float,
    total_steps: int,
    warmup_fraction: float = 0.05,
    min_lr_ratio: float = 0.0,
) -> keras.optimizers.schedules.LearningRateSchedule:
    """Linear warmup from 0 to `base_lr`, then cosine decay to `min_lr_ratio` x `base_lr`."""
    warmup_steps = max(1, round(warmup_fraction * total_steps))
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        decay_steps=max(1, total_steps - warmup_steps),
        alpha=min_lr_ratio,
        warmup_target=base_lr,
        warmup_steps=warmup_steps,
    )


def constant(base_lr: float, total_steps: int) -> float:
    """The base LR throughout."""
    del total_steps
    return base_lr
