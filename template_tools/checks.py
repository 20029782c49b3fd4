"""Check the answers, all at once (the pre-generation hook) or those given so far (prompts)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from template_tools.frameworks import check_python
from template_tools.gpus import check_gpu, check_gpu_runs_the_image
from template_tools.naming import check_package_name, check_project_slug

# In prompt order: each rule checks once every answer it reads has been given.
RULES: list[tuple[tuple[str, ...], Callable[[Mapping[str, Any]], None]]] = [
    (("project_slug",), lambda a: check_project_slug(a["project_slug"], a.get("project_name"))),
    (("package_name",), lambda a: check_package_name(a["package_name"])),
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
