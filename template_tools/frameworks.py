"""Which Python versions each framework choice supports, from frameworks.json."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from template_tools.errors import AnswerError

CATALOG = Path(__file__).with_name("frameworks.json")


@cache
def frameworks() -> dict[str, dict[str, Any]]:
    """Framework choice -> {"package", "version", "python": [versions with wheels]}."""
    return json.loads(CATALOG.read_text(encoding="utf-8"))["frameworks"]


def check_python(framework: str, python_version: str) -> None:
    """Raise AnswerError unless `framework`'s pinned release has wheels for `python_version`."""
    release = frameworks()[framework]
    supported = release["python"]
    if python_version not in supported:
        raise AnswerError(
            f"python_version {python_version!r} has no {release['package']}=={release['version']} "
            f"wheels (framework {framework!r}), which support {', '.join(supported)}",
            "python_version",
            supported[-1],
            "or another of those, or another framework",
            choices=supported,
        )
