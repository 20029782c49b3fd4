"""Helpers for the template's hooks, tests and tasks: answer checks, variants, pruning, records.

The hooks import this package from the template folder, so it uses only the standard library
and what cookiecutter itself depends on.
"""

from template_tools.checks import validate
from template_tools.gpus import gpus_on
from template_tools.licenses import license_text, write_license
from template_tools.naming import check_package_name, check_project_slug
from template_tools.prune import prune
from template_tools.record import write_answers_record
from template_tools.variants import bake, choices, default_answers, variants

__all__ = [
    "bake",
    "check_package_name",
    "check_project_slug",
    "choices",
    "default_answers",
    "gpus_on",
    "license_text",
    "prune",
    "validate",
    "variants",
    "write_answers_record",
    "write_license",
]
