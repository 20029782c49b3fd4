"""Helpers for the template's hooks, tests and tasks: answer checks, variants, pruning, records.

The hooks import this package from the template folder under the Python that runs cookiecutter
or cruft, so it needs nothing beyond the standard library, cookiecutter and its dependencies.
"""

from template_tools.checks import check_given, validate
from template_tools.errors import AnswerError
from template_tools.frameworks import check_python, frameworks
from template_tools.gpus import check_gpu, gpus_on
from template_tools.hook_copies import remove_at_exit
from template_tools.images import write_image_defaults
from template_tools.licenses import license_text, write_license
from template_tools.naming import check_package_name, check_project_slug
from template_tools.next_steps import QUIET_ENV, next_steps
from template_tools.package import write_package_pin
from template_tools.prune import prune
from template_tools.record import write_answers_record
from template_tools.variants import Variant, bake, choices, default_answers, variants

__all__ = [
    "QUIET_ENV",
    "AnswerError",
    "Variant",
    "bake",
    "check_given",
    "check_gpu",
    "check_package_name",
    "check_project_slug",
    "check_python",
    "choices",
    "default_answers",
    "frameworks",
    "gpus_on",
    "license_text",
    "next_steps",
    "prune",
    "remove_at_exit",
    "validate",
    "variants",
    "write_answers_record",
    "write_image_defaults",
    "write_license",
    "write_package_pin",
]
