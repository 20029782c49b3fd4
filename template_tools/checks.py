"""Check the answers, all at once (the pre-generation hook) or those given so far (prompts)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from template_tools.errors import AnswerError
from template_tools.frameworks import check_python
from template_tools.gpus import check_gpu, check_gpu_runs_the_image
from template_tools.naming import check_package_name, check_project_slug

# The options with a fixed list of answers. cookiecutter.json keeps the lists under `_choices`
# and each option's default as a plain string: cookiecutter checks a list option's command-line
# value itself, before any of the template's code runs, and ends in a traceback.
CHOICE_OPTIONS = (
    "framework",
    "python_version",
    "default_cloud",
    "default_gpu",
    "tracking",
    "license",
)


def check_choice(answers: Mapping[str, Any], option: str) -> None:
    """Raise AnswerError unless `option`'s answer is one of its `_choices`."""
    offered = answers.get("_choices", {}).get(option)
    if offered and answers[option] not in offered:
        raise AnswerError(
            f"{option} {answers[option]!r} is not one of {', '.join(offered)}",
            option,
            offered[0],
            "or another of those",
            choices=offered,
        )


def _choice_rule(option: str) -> Callable[[Mapping[str, Any]], None]:
    return lambda answers: check_choice(answers, option)


# In prompt order: each rule checks once every answer it reads has been given.
RULES: list[tuple[tuple[str, ...], Callable[[Mapping[str, Any]], None]]] = [
    (("project_slug",), lambda a: check_project_slug(a["project_slug"], a.get("project_name"))),
    (("package_name",), lambda a: check_package_name(a["package_name"])),
    *(((option,), _choice_rule(option)) for option in CHOICE_OPTIONS),
    (("framework", "python_version"), lambda a: check_python(a["framework"], a["python_version"])),
    (("default_cloud", "default_gpu"), lambda a: check_gpu(a["default_cloud"], a["default_gpu"])),
    (
        ("framework", "default_cloud", "default_gpu"),
        lambda a: check_gpu_runs_the_image(a["framework"], a["default_cloud"], a["default_gpu"]),
    ),
]


def check_given(answers: Mapping[str, Any]) -> None:
    """Raise AnswerError for the first rule broken by the answers given so far."""
    for needs, rule in RULES:
        if all(key in answers for key in needs):
            rule(answers)


def validate(answers: Mapping[str, Any]) -> None:
    """Raise AnswerError naming the first answer that breaks a rule, in prompt order."""
    missing = sorted({key for needs, _ in RULES for key in needs} - set(answers))
    if missing:
        raise KeyError(f"answers lack {', '.join(missing)}")
    check_given(answers)
