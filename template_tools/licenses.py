"""LICENSE texts for the license choice, with the author and year filled in."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from string import Template
from typing import Any

TEXTS = Path(__file__).with_name("licenses")
# The choice that writes no LICENSE: all rights reserved.
PROPRIETARY = "Proprietary"


def license_text(name: str, author: str, year: int | None = None) -> str:
    """The text of license `name` (a file in licenses/), for `author` and `year` (default: now)."""
    text = (TEXTS / f"{name}.txt").read_text(encoding="utf-8")
    year = year or datetime.date.today().year
    return Template(text).substitute(author=author, year=year)


def write_license(project_dir: Path, answers: Mapping[str, Any]) -> Path | None:
    """Write LICENSE for the chosen license; None (and no file) when it is Proprietary."""
    if answers["license"] == PROPRIETARY:
        return None
    path = Path(project_dir) / "LICENSE"
    path.write_text(license_text(answers["license"], answers["author_name"]), encoding="utf-8")
    return path
