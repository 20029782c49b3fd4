"""Validate a whole set of answers, as the pre-generation hook does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from template_tools.frameworks import check_python
from template_tools.gpus import check_gpu
from template_tools.naming import check_package_name, check_project_slug


def validate(answers: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first answer that breaks a rule, in prompt order."""
    check_project_slug(answers["project_slug"], answers.get("project_name"))
    check_package_name(answers["package_name"])
    check_python(answers["framework"], answers["python_version"])
    check_gpu(answers["default_cloud"], answers["default_gpu"])
