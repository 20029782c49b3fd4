"""How a project's pyproject.toml pins this package (the template's post-generation hook writes
the pin; `invoke upgrade` moves it): a PyPI release or a git tag cloudgpu-vX of this repository.
A clone's copy (a file: pin) names no release."""

from __future__ import annotations

import re

PYPI = re.compile(r'"cloudgpu==(?P<version>[^"\s]+)"')
GIT = re.compile(
    r'"cloudgpu @ git\+(?P<url>[^"@\s]+(?:@[^"@\s]+)?)@cloudgpu-v(?P<version>[^"#\s]+)'
)


def pinned_release(pyproject: str) -> str | None:
    """The release pyproject.toml's text pins, or None for a clone's copy (or no pin)."""
    found = PYPI.search(pyproject) or GIT.search(pyproject)
    return found["version"] if found else None
