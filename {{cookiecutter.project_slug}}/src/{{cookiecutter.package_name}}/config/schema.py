"""The type and the valid range of every config key, so a bad value stops before any work.

The YAML files in configs/ hold the values (every default is there, and only there); these classes
say what each key must be (rules.py has the rules). Hydra checks the types as it composes
(`trainer.max_epochs=ten`); checks.py the ranges (`trainer.max_epochs=0`), keys added with `+`
that no code reads, and the keys of the `_target_` groups (model, optimizer, scheduler, logger),
which take any class: their keys must be that class's arguments, and those named in TARGET_RULES
must fit the rule. preflight.py runs both before Hydra makes a run directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from typing import Any, Optional, Union, get_args, get_origin, get_type_hints

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from .rules import (
    BOOLEAN,
    COUNT,
    HTTP_URL,
    METRIC,
    NON_NEGATIVE,
    OPEN_FRACTION,
    PORT,
    POSITIVE,
    PROBABILITY,
    RESULT,
    UNIT_INTERVAL,
    WORKERS,
    Rule,
    each,
    is_integer,
    key,
    optional,
)

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


class MissingValues(StrEnum):
    fill = "fill"
    drop = "drop"


class Scaling(StrEnum):
    standard = "standard"
    minmax = "minmax"
    none = "none"


class InvalidValues(StrEnum):
    refuse = "refuse"
    missing = "missing"


class SplitName(StrEnum):
    train = "train"
    val = "val"
    test = "test"


@dataclass
class ShardsConfig:
    shuffle_block: int = key(COUNT)
    cache_dir: str = MISSING
    cache_gb: float = key(POSITIVE)


@dataclass
class DataConfig:
    source: str = MISSING
    val_fraction: float = key(OPEN_FRACTION)
    test_fraction: float = key(OPEN_FRACTION)
    split_seed: int = MISSING
    batch_size: int = key(COUNT)
    # auto or a number (data/sources.py: readers); Any, as OmegaConf cannot merge into a Union
    num_workers: Any = field(default=MISSING, metadata={"rule": WORKERS})
    folds: int = key(Rule("an integer of at least 2", lambda v: is_integer(v) and v >= 2))
    label: Optional[str] = MISSING  # a .csv's label column, by name or number; null: the last
    header: Optional[bool] = MISSING  # whether a .csv's first row names its columns; null: detect
    missing: MissingValues = MISSING  # a .csv's missing cells (data/preparation.py)
    scaling: Scaling = MISSING
    invalid: InvalidValues = MISSING
    shards: Optional[ShardsConfig] = MISSING


@dataclass
class TrainerConfig:
    max_epochs: int = key(COUNT)
    device: Device = MISSING
    precision: Precision = MISSING
    accumulate_grad_batches: int = key(COUNT)
    gradient_clip_norm: Optional[float] = key(optional(POSITIVE))
    compile: bool = MISSING
    tf32: bool = MISSING
    deterministic: bool = MISSING
    log_every_n_steps: int = key(COUNT)
    stop_check_every_n_steps: int = key(COUNT)
    progress_bar: Optional[bool] = MISSING  # null: only on a terminal
    limit_train_batches: Optional[int] = key(optional(COUNT))
    limit_eval_batches: Optional[int] = key(optional(COUNT))


@dataclass
class EarlyStoppingConfig:
    monitor: str = key(METRIC)
    mode: Mode = MISSING
    patience: int = key(COUNT)
    min_delta: float = key(NON_NEGATIVE)


@dataclass
class CheckpointConfig:
    monitor: str = key(METRIC)
    mode: Mode = MISSING
    every_n_steps: Optional[int] = key(optional(COUNT))
    min_interval_s: float = key(NON_NEGATIVE)
    mirror_uri: Optional[str] = MISSING


@dataclass
class CallbacksConfig:
    early_stopping: Optional[EarlyStoppingConfig] = MISSING
    checkpoint: CheckpointConfig = MISSING


@dataclass
class MonitoringConfig:
    enabled: bool = MISSING
    host: str = MISSING
    port: int = key(PORT)
    pushgateway: Optional[str] = key(optional(HTTP_URL))
    targets_dir: Optional[str] = MISSING


@dataclass
class TrainConfig:
    data: DataConfig = MISSING
    trainer: TrainerConfig = MISSING
    callbacks: CallbacksConfig = MISSING
    model: Any = MISSING
    optimizer: Any = MISSING
    scheduler: Any = MISSING
    logger: Any = MISSING
    monitoring: MonitoringConfig = MISSING
    paths: Any = MISSING
    task_name: str = MISSING
    tags: list[str] = MISSING
    seed: int = MISSING
    ckpt_path: Optional[str] = MISSING
    test: bool = MISSING
    optimized_metric: Optional[str] = key(optional(RESULT))


@dataclass
class EvaluateConfig:
    paths: Any = MISSING
    task_name: str = MISSING
    ckpt_path: str = MISSING
    split: SplitName = MISSING
    data_source: Optional[str] = MISSING
    device: Device = MISSING
    batch_size: int = key(COUNT)


# The `_target_` groups take any class, so their keys are not typed above. Each key must be an
# argument of its `_target_` (unless it takes **kwargs), of the type its signature gives where it
# is a plain one (bool, int, float, str, a Literal); these, where present, must also fit the rule.
TARGET_RULES = {
    "model.hidden_sizes": each(COUNT),
    "model.channels": each(COUNT),
    "model.dropout": PROBABILITY,
    "optimizer.lr": POSITIVE,
    "optimizer.weight_decay": NON_NEGATIVE,
    "optimizer.momentum": PROBABILITY,
    "optimizer.nesterov": BOOLEAN,
    "scheduler.warmup_fraction": PROBABILITY,
    "scheduler.min_lr_ratio": UNIT_INTERVAL,
}
# Arguments the code passes itself (not config keys), and `lr`, which the trainer turns into
# the schedule's peak before the optimizer class sees it.
PASSED_BY_CODE = {"model": {"input_shape", "num_classes"}, "optimizer": {"lr", "params"}}
HYDRA_KEYS = ("_target_", "_partial_", "_convert_", "_recursive_", "_args_")
SCHEMAS: dict[str, type] = {
    "train": TrainConfig,
    "crossval": TrainConfig,
    "evaluate": EvaluateConfig,
}


def register() -> None:
    """Make the schemas available to configs/*.yaml as the first entry of their defaults."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="evaluate_schema", node=EvaluateConfig)


def dataclass_in(hint: Any) -> type | None:
    """The dataclass in a type hint (`X` or `Optional[X]`), if any."""
    for candidate in (hint, *get_args(hint)):
        if is_dataclass(candidate):
            return candidate  # type: ignore[return-value]
    return None


def _node_at(path: str, schema: type) -> type | None:
    """The dataclass of the typed node at dotted `path` ('' for the top), if it is typed."""
    node: type | None = schema
    for part in filter(None, path.split(".")):
        hint = get_type_hints(node).get(part) if node is not None else None
        node = dataclass_in(hint) if hint is not None else None
    return node


def keys_at(path: str, schema: type = TrainConfig) -> list[str]:
    """The dotted keys the schema gives the node at `path` ('' for the top)."""
    node = _node_at(path, schema)
    prefix = f"{path}." if path else ""
    return [f"{prefix}{spec.name}" for spec in fields(node)] if node is not None else []


def wants(path: str, schema: type = TrainConfig) -> str | None:
    """What the typed key at dotted `path` must be, in words; None for an untyped key."""
    parent, _, name = path.rpartition(".")
    node = _node_at(parent, schema)
    spec = next((s for s in fields(node) if s.name == name), None) if node is not None else None
    if node is None or spec is None:
        return None
    rule = spec.metadata.get("rule")
    return rule.wants if rule is not None else _type_words(get_type_hints(node)[name])


def _type_words(hint: Any) -> str:
    optional_ = get_origin(hint) is Union and type(None) in get_args(hint)
    base = next((a for a in get_args(hint) if a is not type(None)), hint) if optional_ else hint
    if isinstance(base, type) and issubclass(base, Enum):
        words = f"one of {', '.join(member.value for member in base)}"
    elif get_origin(base) is list:
        words = "a list"
    else:
        words = {int: "an integer", float: "a number", bool: "true or false", str: "text"}.get(
            base, "a settings group"
        )
    return f"null or {words}" if optional_ else words
