"""Rules for the project's folder name (project_slug) and import name (package_name)."""

from __future__ import annotations

import keyword
import re
import sys

from slugify import slugify

from template_tools.errors import AnswerError

SLUG_RULE = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")
PACKAGE_RULE = re.compile(r"^[a-z][a-z0-9_]*$")
# cookiecutter.json's project_slug falls back to this when project_name has no letters or digits:
# cookiecutter creates the project folder before the pre-gen hook runs, and an empty name would
# be the output folder itself, failing with a confusing "directory already exists".
EMPTY_SLUG = "_empty_"

# Import names the generated project (or a framework variant of it) imports: a package with one
# of these names would shadow the real dependency inside the project's own src/ layout.
SHADOWED_IMPORTS = frozenset(
    {
        "torch",
        "tensorflow",
        "keras",
        "hydra",
        "omegaconf",
        "numpy",
        "sklearn",
        "wandb",
        "optuna",
        "fsspec",
        "tqdm",
        "invoke",
        "pytest",
    }
)


def _words(text: str) -> list[str]:
    """The words of `text` as cookiecutter's `slugify` filter finds them: ASCII, lowercase."""
    return [word for word in slugify(text).split("-") if word]


def suggest_slug(slug: str) -> str:
    """A valid slug close to `slug`: lowercased, hyphen-joined, leading digits moved to the end."""
    words = _words(slug)
    leading = []
    while words and words[0][0].isdigit():
        leading.append(words.pop(0))
    return "-".join(words + leading) if words else "-".join(["project", *leading])


def _reject(option: str, value: str, rule: str, suggestion: str) -> AnswerError:
    return AnswerError(f"{option} {value!r} {rule}", option, suggestion)


def check_project_slug(slug: str, project_name: str | None = None) -> None:
    """Raise AnswerError unless `slug` is lowercase letters, digits and single inner hyphens."""
    if not slug or slug == EMPTY_SLUG:
        source = f"project_name {project_name!r} has" if project_name is not None else "it has"
        raise AnswerError(
            f"project_slug is empty: {source} no letters or digits to make one from",
            "project_slug",
            "my-project",
            "or a project_name with letters",
        )
    if SLUG_RULE.match(slug):
        return
    if not slug[0].isalpha():
        rule = "must start with a letter"
    elif slug != slug.lower():
        rule = "must be lowercase"
    elif re.search(r"\s", slug):
        rule = "must not contain spaces"
    else:
        rule = "may hold only lowercase letters, digits and single hyphens between them"
    raise _reject("project_slug", slug, rule, suggest_slug(slug))


def suggest_package_name(name: str) -> str:
    """A valid package name close to `name`."""
    words = _words(name)
    if words and not words[0][0].isdigit() and "_".join(words) != name:
        candidate = "_".join(words)
    else:
        candidate = suggest_slug(name).replace("-", "_")
    if _package_problem(candidate):
        candidate = f"{candidate}_project"
    return candidate


def _package_problem(name: str) -> str | None:
    """Why `name` cannot be the package name, or None when it can."""
    if not name:
        return "is empty"
    if not name[0].isalpha() or not name.isascii():
        return "must start with an ASCII letter"
    if not PACKAGE_RULE.match(name):
        return "may hold only lowercase letters, digits and underscores"
    if name in keyword.kwlist or name in keyword.softkwlist:
        return "is a Python keyword"
    if name in sys.stdlib_module_names:
        return "is a standard-library module, which the package would shadow"
    if name in SHADOWED_IMPORTS:
        return "is a dependency the project imports, which the package would shadow"
    return None


def check_package_name(name: str) -> None:
    """Raise AnswerError unless `name` is a lowercase identifier that shadows no other import."""
    problem = _package_problem(name)
    if problem:
        raise _reject("package_name", name, problem, suggest_package_name(name))
