"""The template's options, the variants worth baking, and baking one."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cookiecutter.generate import generate_context
from cookiecutter.main import cookiecutter
from cookiecutter.prompt import prompt_for_config

from template_tools.checks import validate
from template_tools.next_steps import QUIET_ENV

TEMPLATE_DIR = Path(__file__).resolve().parent.parent
# Options whose every combination is baked: each changes which files or dependencies exist.
PRODUCT_OPTIONS = ("framework", "tracking", "default_cloud")
# Options that only change a value inside files: each choice appears in some variant, in turn.
CYCLED_OPTIONS = ("python_version", "license")


@dataclass(frozen=True)
class Variant:
    """One set of answers to bake: `extra_context` for cookiecutter, `id` to name it in tests."""

    id: str
    extra_context: dict[str, str]


def choices(template_dir: Path = TEMPLATE_DIR) -> dict[str, list[str]]:
    """Each choice option in cookiecutter.json's `_choices` and its choices, the default first."""
    spec = json.loads((Path(template_dir) / "cookiecutter.json").read_text(encoding="utf-8"))
    return {key: list(values) for key, values in spec["_choices"].items()}


def default_answers(
    template_dir: Path = TEMPLATE_DIR, extra_context: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The answers `cookiecutter --no-input` would use, rendered (slug and package included)."""
    context = generate_context(
        context_file=str(Path(template_dir) / "cookiecutter.json"),
        extra_context=dict(extra_context or {}),
    )
    return dict(prompt_for_config(context, no_input=True))


def _is_valid(answers: Mapping[str, Any]) -> bool:
    try:
        validate(answers)
    except ValueError:
        return False
    return True


def variants(template_dir: Path = TEMPLATE_DIR) -> list[Variant]:
    """Every valid combination of PRODUCT_OPTIONS; CYCLED_OPTIONS take their valid choices in turn.

    Options in neither list (default_gpu among them) keep their defaults.
    """
    options = choices(template_dir)
    defaults = default_answers(template_dir)
    combos = [
        dict(zip(PRODUCT_OPTIONS, values, strict=True))
        for values in itertools.product(*(options[name] for name in PRODUCT_OPTIONS))
    ]
    combos = [combo for combo in combos if _is_valid({**defaults, **combo})]
    found = []
    for index, combo in enumerate(combos):
        for name in CYCLED_OPTIONS:
            # This variant's turn, or the next choice after it that is valid with the rest.
            turns = options[name][index % len(options[name]) :] + options[name]
            combo[name] = next(c for c in turns if _is_valid({**defaults, **combo, name: c}))
        found.append(Variant(id="-".join(combo.values()), extra_context=combo))
    return found


def bake(template_dir: Path, output_dir: Path, extra_context: Mapping[str, str]) -> Path:
    """Generate one project with cookiecutter, no prompts, ignoring ~/.cookiecutterrc.

    The hooks print no next steps: the callers (invoke bake, demo, the tests) say their own.
    """
    previous = os.environ.get(QUIET_ENV)
    os.environ[QUIET_ENV] = "1"
    try:
        project = cookiecutter(
            str(template_dir),
            no_input=True,
            extra_context=dict(extra_context),
            output_dir=str(output_dir),
            default_config=True,
        )
    finally:
        if previous is None:
            del os.environ[QUIET_ENV]
        else:
            os.environ[QUIET_ENV] = previous
    return Path(project)
