"""Every broken rule of a composed config, one line each: the key, the value as typed, and what
it must be (schema.py says what each key must be; preflight.py asks before Hydra starts)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Iterator, Mapping
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import dataclass, fields
from typing import Any, get_type_hints

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from .rules import is_number, rule_of_hint
from .schema import HYDRA_KEYS, PASSED_BY_CODE, TARGET_RULES, TrainConfig, dataclass_in


def problems(
    cfg: DictConfig, schema: type = TrainConfig, typed: Mapping[str, str] | None = None
) -> Iterator[str]:
    """Every broken rule of a composed config, as one line each: key, value, what it must be;
    those that need no import first (a refusal then costs no framework import).

    `typed` holds the values as the command line gave them (`0` rather than the config's 0.0).
    """
    yield from plain_problems(cfg, schema, typed)
    yield from target_problems(cfg)


def plain_problems(
    cfg: DictConfig, schema: type = TrainConfig, typed: Mapping[str, str] | None = None
) -> Iterator[str]:
    """The broken rules that reading the config alone shows: the schema's, TARGET_RULES'."""
    shown = _Shown(typed or {})
    yield from _typed(cfg, schema, "", shown)
    for path, rule in TARGET_RULES.items():
        value = OmegaConf.select(cfg, path, default=NO_DEFAULT)
        if value is not NO_DEFAULT and not rule.ok(value):
            yield f"{path}={shown(path, value)} must be {rule.wants}"
    data = cfg.get("data")
    fractions = [data.get(name) for name in ("val_fraction", "test_fraction")] if data else []
    if len(fractions) == 2 and all(map(is_number, fractions)) and sum(fractions) >= 1:
        yield (
            f"data.val_fraction={fractions[0]} and data.test_fraction={fractions[1]} must add "
            "up to less than 1, leaving data to train on"
        )


def target_problems(cfg: DictConfig) -> Iterator[str]:
    """The keys of the `_target_` groups that their class does not take, or not of its type:
    each target is imported (the framework with it) to read its signature."""
    for name in ("model", "optimizer", "scheduler"):
        if name in cfg:
            yield from _target_keys(cfg[name], name)
    for name, node in (cfg.get("logger") or {}).items():
        yield from _target_keys(node, f"logger.{name}")


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
        nested = dataclass_in(hints[spec.name])
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
            rule = rule_of_hint(hints[name])
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
