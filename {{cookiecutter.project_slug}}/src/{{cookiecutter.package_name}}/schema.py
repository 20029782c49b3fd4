"""The type and the valid range of every config key, so a bad value stops before any work.

The YAML files in configs/ hold the values (every default is there, and only there); these classes
say what each key must be. Hydra checks the types as it composes (`trainer.max_epochs=ten`);
`problems()` checks the ranges (`trainer.max_epochs=0`), keys added with `+` that no code reads,
and the keys of the `_target_` groups (model, optimizer, scheduler, logger), which take any class:
their keys must be that class's arguments, and those named in TARGET_RULES must fit the rule.
preflight.py runs both before Hydra makes a run directory.
"""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum, StrEnum
from types import UnionType
from typing import Any, Literal, Optional, Union, get_args, get_origin, get_type_hints

from hydra.core.config_store import ConfigStore
from hydra.utils import get_object
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

# OmegaConf reads these annotations at runtime: keep Optional[...] rather than `X | None`.
# ruff: noqa: UP045


@dataclass(frozen=True)
class Rule:
    """What a value must be, in words for the error message, and the check."""

    wants: str
    ok: Callable[[Any], bool]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


COUNT = Rule("an integer of at least 1", lambda v: _integer(v) and v >= 1)
NON_NEGATIVE_INT = Rule("an integer of at least 0", lambda v: _integer(v) and v >= 0)
POSITIVE = Rule("a number above 0", lambda v: _number(v) and v > 0)
NON_NEGATIVE = Rule("a number of at least 0", lambda v: _number(v) and v >= 0)
OPEN_FRACTION = Rule("a number between 0 and 1, both excluded", lambda v: _number(v) and 0 < v < 1)
PROBABILITY = Rule("a number from 0 up to, not including, 1", lambda v: _number(v) and 0 <= v < 1)
UNIT_INTERVAL = Rule("a number from 0 to 1", lambda v: _number(v) and 0 <= v <= 1)
BOOLEAN = Rule("true or false", lambda v: isinstance(v, bool))
# Up to 65535 less the ranks of a machine, which serve on port + local rank.
PORT = Rule("an integer from 1024 to 65000", lambda v: _integer(v) and 1024 <= v <= 65000)
HTTP_URL = Rule(
    "an http:// or https:// URL",
    lambda v: isinstance(v, str) and v.startswith(("http://", "https://")),
)
METRIC = Rule(
    "a metric the loop reports: val/loss or val/accuracy",
    lambda v: v in ("val/loss", "val/accuracy"),
)
RESULT = Rule(
    "a metric a run returns: val/loss, val/accuracy, test/loss or test/accuracy",
    lambda v: v in ("val/loss", "val/accuracy", "test/loss", "test/accuracy"),
)


def each(rule: Rule) -> Rule:
    """A list whose every item fits `rule`."""
    items = rule.wants.replace("an integer", "integers").replace("a number", "numbers")
    return Rule(
        f"a list of {items}",
        lambda v: isinstance(v, list | tuple | ListConfig) and all(rule.ok(i) for i in v),
    )


def optional(rule: Rule) -> Rule:
    return Rule(f"null or {rule.wants}", lambda v: v is None or rule.ok(v))


def one_of(*choices: str) -> Rule:
    return Rule(f"one of {', '.join(choices)}", lambda v: v in choices)


def key(rule: Rule) -> Any:
    """A key whose value the YAML sets (MISSING here), checked against `rule` once composed."""
    return field(default=MISSING, metadata={"rule": rule})


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
    num_workers: int = key(NON_NEGATIVE_INT)
    folds: int = key(Rule("an integer of at least 2", lambda v: _integer(v) and v >= 2))
    shards: Optional[ShardsConfig] = MISSING


@dataclass
class TrainerConfig:
    max_epochs: int = key(COUNT)
    device: Device = MISSING
    precision: Precision = MISSING
    accumulate_grad_batches: int = key(COUNT)
    gradient_clip_norm: Optional[float] = key(optional(POSITIVE))
    compile: bool = MISSING
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


def problems(
    cfg: DictConfig, schema: type = TrainConfig, typed: Mapping[str, str] | None = None
) -> Iterator[str]:
    """Every broken rule of a composed config, as one line each: key, value, what it must be.

    `typed` holds the values as the command line gave them (`0` rather than the config's 0.0).
    """
    shown = _Shown(typed or {})
    yield from _typed(cfg, schema, "", shown)
    for name in ("model", "optimizer", "scheduler"):
        if name in cfg:
            yield from _target_keys(cfg[name], name)
    for name, node in (cfg.get("logger") or {}).items():
        yield from _target_keys(node, f"logger.{name}")
    for path, rule in TARGET_RULES.items():
        value = OmegaConf.select(cfg, path, default=NO_DEFAULT)
        if value is not NO_DEFAULT and not rule.ok(value):
            yield f"{path}={shown(path, value)} must be {rule.wants}"
    data = cfg.get("data")
    fractions = [data.get(name) for name in ("val_fraction", "test_fraction")] if data else []
    if len(fractions) == 2 and all(map(_number, fractions)) and sum(fractions) >= 1:
        yield (
            f"data.val_fraction={fractions[0]} and data.test_fraction={fractions[1]} must add "
            "up to less than 1, leaving data to train on"
        )


def _typed(node: DictConfig, schema: type, prefix: str, shown: _Shown) -> Iterator[str]:
    names = {spec.name for spec in fields(schema)}
    composed = {"hydra"} if not prefix else set()  # Hydra's own settings, when composed with them
    for extra in sorted({str(k) for k in node} - names - composed):  # added with `+`: unread
        yield unknown_key(f"{prefix}{extra}", [f"{prefix}{name}" for name in names])
    hints = get_type_hints(schema)
    for spec in fields(schema):
        path = f"{prefix}{spec.name}"
        if OmegaConf.is_missing(node, spec.name):
            yield f"{path} has no value; set it: {path}=..."
            continue
        value = node[spec.name]
        nested = _dataclass_in(hints[spec.name])
        if nested is not None and isinstance(value, DictConfig):
            yield from _typed(value, nested, f"{path}.", shown)
        rule = spec.metadata.get("rule")
        if rule is not None and not rule.ok(value):
            yield f"{path}={shown(path, value)} must be {rule.wants}"


def _target_keys(node: Any, path: str) -> Iterator[str]:
    """Keys of a `_target_` node its target does not take, or whose value is not of the type
    the target's signature gives."""
    if not isinstance(node, DictConfig) or "_target_" not in node:
        return
    try:
        target = get_object(node._target_)
    except Exception:  # Hydra wraps every import failure in its own way
        yield f"{path}._target_={node._target_} cannot be imported"
        return
    hints, open_ended = target_arguments(target)
    passed = PASSED_BY_CODE.get(path, set())
    for name in map(str, node):
        if name in HYDRA_KEYS or name in passed:
            continue
        if name in hints:
            rule = _rule_of(hints[name])
            if rule is not None and not rule.ok(node[name]):
                yield f"{path}.{name}={_Shown({})(path, node[name])} must be {rule.wants}"
        elif not open_ended:
            known = [f"{path}.{k}" for k in sorted(set(hints) - passed - {"self"})]
            yield unknown_key(f"{path}.{name}", known, node._target_)


def target_arguments(target: Any) -> tuple[dict[str, Any], bool]:
    """A callable's arguments with their type hints (Any where none), and whether it also
    takes **kwargs. A builtin without a signature takes anything."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return {}, True
    try:
        hints = get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except Exception:  # a hint that does not resolve here (a library's private types)
        hints = {}
    named = {
        p.name: hints.get(p.name, Any)
        for p in parameters
        if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    }
    return named, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _rule_of(hint: Any) -> Rule | None:
    """A Rule for a plain type hint (bool, int, float, str, a Literal, Optional of those)."""
    if get_origin(hint) is Literal:
        return one_of(*map(str, get_args(hint)))
    if get_origin(hint) in (Union, UnionType) and type(None) in get_args(hint):
        inner = [a for a in get_args(hint) if a is not type(None)]
        rule = _rule_of(inner[0]) if len(inner) == 1 else None
        return optional(rule) if rule is not None else None
    plain = {
        bool: BOOLEAN,
        int: Rule("an integer", _integer),
        float: Rule("a number", _number),
        str: Rule("text", lambda v: isinstance(v, str)),
    }
    return plain.get(hint)


def unknown_key(path: str, known: list[str], owner: str | None = None) -> str:
    """The message for a key nothing reads, with the nearest known key when one is close."""
    name = path.rsplit(".", 1)[-1]
    by_name = {key.rsplit(".", 1)[-1]: key for key in known}
    close = difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.7)
    where = f"{owner} takes no argument {name!r}" if owner else "no such key"
    hint = (
        f"; did you mean {by_name[close[0]]}?"
        if close
        else f"; the keys: {', '.join(sorted(known))}"
    )
    return f"{path}: {where}{hint}"


def is_near_miss(path: str, known: list[str]) -> bool:
    """Whether `path` looks like a misspelling of one of `known`."""
    names = [key.rsplit(".", 1)[-1] for key in known]
    return bool(difflib.get_close_matches(path.rsplit(".", 1)[-1], names, n=1, cutoff=0.7))


def _dataclass_in(hint: Any) -> type | None:
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
        node = _dataclass_in(hint) if hint is not None else None
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


@dataclass(frozen=True)
class _Shown:
    """A value as the user typed it when they did, else as the config holds it."""

    typed: Mapping[str, str]

    def __call__(self, path: str, value: Any) -> str:
        if path in self.typed:
            return self.typed[path]
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value)
        return str(value)
