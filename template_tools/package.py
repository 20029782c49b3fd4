"""Where a baked project gets the cloudgpu package (the folder cloudgpu/ of this repository): the
exact release it pins in pyproject.toml, and from where.

- released on PyPI (cloudgpu/pyproject.toml's [tool.cloudgpu] on-pypi): `cloudgpu==X`;
- made from a git URL (gh:owner/repo, https://..., git@...): that repository's tag cloudgpu-vX;
- made from a local clone: that clone's cloudgpu/ folder (tests, and work on the package itself).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cookiecutter.config import BUILTIN_ABBREVIATIONS
from cookiecutter.repository import expand_abbreviations, is_repo_url

from template_tools.record import template_source

NAME = "cloudgpu"
FOLDER = Path(__file__).resolve().parent.parent / NAME
# The project template's line that the post-generation hook replaces with the pin.
PLACEHOLDER = f'"{NAME}",  # pinned by the template'
VERSION_LINE = re.compile(r'^__version__ = "(?P<version>[^"]+)"', re.MULTILINE)


def version(folder: Path = FOLDER) -> str:
    """The package's version, from its __init__.py (the one place it is written)."""
    found = VERSION_LINE.search((folder / "src" / NAME / "__init__.py").read_text("utf-8"))
    if found is None:
        raise LookupError(f"{folder}/src/{NAME}/__init__.py has no __version__ line")
    return found["version"]


def on_pypi(folder: Path = FOLDER) -> bool:
    meta = tomllib.loads((folder / "pyproject.toml").read_text("utf-8"))
    return bool(meta.get("tool", {}).get(NAME, {}).get("on-pypi", False))


def git_requirement(url: str, directory: str | None, release: str) -> str:
    """PEP 508 for the tag of `release` in the repository at `url` (as cookiecutter takes it)."""
    url = url.removeprefix("git+")
    if url.startswith("git@"):  # git@github.com:owner/repo.git -> ssh://git@github.com/owner/...
        url = "ssh://" + url.replace(":", "/", 1)
    subdirectory = f"{directory}/{NAME}" if directory else NAME
    return f"{NAME} @ git+{url}@{NAME}-v{release}#subdirectory={subdirectory}"


def requirement(template: str, template_dir: Path) -> str:
    """What a project made from `template` (cookiecutter's argument; its files in
    `template_dir`) pins."""
    folder = Path(template_dir) / NAME
    release = version(folder)
    if on_pypi(folder):
        return f"{NAME}=={release}"
    url = expand_abbreviations(template, BUILTIN_ABBREVIATIONS)
    if is_repo_url(url):
        return git_requirement(url, template_source(template, template_dir)[1], release)
    # cruft updates from a clone in a temporary folder: the path recorded is the lasting one.
    given = Path(template).expanduser()
    local = given / NAME if given.is_absolute() and (given / NAME).is_dir() else folder
    return f"{NAME} @ {local.resolve().as_uri()}"


def write_package_pin(project_dir: Path, answers: Mapping[str, Any], template_dir: Path) -> str:
    """Replace the placeholder of pyproject.toml with the pin; return the pin."""
    pin = requirement(str(answers["_template"]), template_dir)
    path = Path(project_dir) / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    if PLACEHOLDER not in text:
        raise LookupError(f"{path} has no {PLACEHOLDER!r} line to pin {NAME} in")
    why = "a clone's own copy, not a release" if " @ file:" in pin else "exact: a release"
    path.write_text(text.replace(PLACEHOLDER, f'"{pin}",  # {why}'), encoding="utf-8")
    return pin
