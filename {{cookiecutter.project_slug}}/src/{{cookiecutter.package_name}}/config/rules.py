"""What a config value must be, in words for the error message and as a check: the rules that
schema.py gives its keys, and the rule for a plain type hint (checks.py, of `_target_` keys)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

from omegaconf import MISSING, ListConfig


@dataclass(frozen=True)
class Rule:
    """What a value must be, in words for the error message, and the check."""

    wants: str
    ok: Callable[[Any], bool]


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


COUNT = Rule("an integer of at least 1", lambda v: is_integer(v) and v >= 1)
NON_NEGATIVE_INT = Rule("an integer of at least 0", lambda v: is_integer(v) and v >= 0)
WORKERS = Rule(
    "auto or an integer of at least 0", lambda v: v == "auto" or (is_integer(v) and v >= 0)
)
POSITIVE = Rule("a number above 0", lambda v: is_number(v) and v > 0)
NON_NEGATIVE = Rule("a number of at least 0", lambda v: is_number(v) and v >= 0)
OPEN_FRACTION = Rule(
    "a number between 0 and 1, both excluded", lambda v: is_number(v) and 0 < v < 1
)
PROBABILITY = Rule("a number from 0 up to, not including, 1", lambda v: is_number(v) and 0 <= v < 1)
UNIT_INTERVAL = Rule("a number from 0 to 1", lambda v: is_number(v) and 0 <= v <= 1)
BOOLEAN = Rule("true or false", lambda v: isinstance(v, bool))
# Up to 65535 less the ranks of a machine, which serve on port + local rank.
PORT = Rule("an integer from 1024 to 65000", lambda v: is_integer(v) and 1024 <= v <= 65000)
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


def rule_of_hint(hint: Any) -> Rule | None:
    """A Rule for a plain type hint (bool, int, float, str, a Literal, Optional of those)."""
    if get_origin(hint) is Literal:
        return one_of(*map(str, get_args(hint)))
    if get_origin(hint) in (Union, UnionType) and type(None) in get_args(hint):
        inner = [a for a in get_args(hint) if a is not type(None)]
        rule = rule_of_hint(inner[0]) if len(inner) == 1 else None
        return optional(rule) if rule is not None else None
    plain = {
        bool: BOOLEAN,
        int: Rule("an integer", is_integer),
        float: Rule("a number", is_number),
        str: Rule("text", lambda v: isinstance(v, str)),
    }
    return plain.get(hint)
