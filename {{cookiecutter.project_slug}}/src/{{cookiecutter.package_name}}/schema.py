"""Types for the config keys the code reads, so Hydra rejects a bad value before training starts.

`trainer.max_epochs=abc` or `trainer.precision=fp8` fail with Hydra's message naming the key, the
value and (for choices) the valid options. The YAML files in configs/ hold the defaults; these
classes only say what type each key has. Groups built by `_target_` (model, optimizer, scheduler)
are checked by the class they instantiate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# OmegaConf reads these annotations at runtime: keep Optional[...] rather than `X | None`.
# ruff: noqa: UP045


class Device(StrEnum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"
    mps = "mps"


class Precision(StrEnum):
    fp32 = "fp32"
    bf16 = "bf16"
    fp16 = "fp16"
    mixed = "mixed"  # bf16 where the hardware has it, else fp16


class Mode(StrEnum):
    min = "min"
    max = "max"


class SplitName(StrEnum):
    train = "train"
    val = "val"
    test = "test"


@dataclass
class DataConfig:
    source: str = MISSING
    val_fraction: float = 0.15
    test_fraction: float = 0.15
    split_seed: int = 1234
    batch_size: int = 64
    num_workers: int = 0
    folds: int = 5  # k of `python -m PACKAGE.crossval`


@dataclass
class TrainerConfig:
    max_epochs: int = 40
    device: Device = Device.auto
    precision: Precision = Precision.fp32
    accumulate_grad_batches: int = 1
    gradient_clip_norm: Optional[float] = 1.0
    compile: bool = False
    deterministic: bool = False
    log_every_n_steps: int = 10
    progress_bar: Optional[bool] = None  # null: only on a terminal
    limit_train_batches: Optional[int] = None
    limit_eval_batches: Optional[int] = None


@dataclass
class EarlyStoppingConfig:
    monitor: str = "val/loss"
    mode: Mode = Mode.min
    patience: int = 8
    min_delta: float = 0.0


@dataclass
class CheckpointConfig:
    monitor: str = "val/accuracy"
    mode: Mode = Mode.max
    every_n_steps: Optional[int] = None
    min_interval_s: float = 30.0
    mirror_uri: Optional[str] = None


@dataclass
class CallbacksConfig:
    early_stopping: Optional[EarlyStoppingConfig] = field(default_factory=EarlyStoppingConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


@dataclass
class TrainConfig:
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    callbacks: CallbacksConfig = field(default_factory=CallbacksConfig)
    model: Any = MISSING
    optimizer: Any = MISSING
    scheduler: Any = MISSING
    logger: Any = MISSING
    paths: Any = MISSING
    task_name: str = "train"
    tags: list[str] = field(default_factory=list)
    seed: int = 42
    ckpt_path: Optional[str] = None
    test: bool = True
    optimized_metric: Optional[str] = None


@dataclass
class EvaluateConfig:
    paths: Any = MISSING
    task_name: str = "evaluate"
    ckpt_path: str = MISSING
    split: SplitName = SplitName.test
    data_source: Optional[str] = None
    device: Device = Device.auto
    batch_size: int = 256


def register() -> None:
    """Make the schemas available to configs/*.yaml as the first entry of their defaults."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="evaluate_schema", node=EvaluateConfig)
