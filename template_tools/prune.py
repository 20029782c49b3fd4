"""Remove the generated files that belong to choices not taken, as listed in prune.json."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

RULES = Path(__file__).with_name("prune.json")
Rules = list[dict[str, Any]]


@cache
def default_rules() -> Rules:
    """The rules from prune.json: [{"when": {option: value}, "remove": [glob, ...]}]."""
    return json.loads(RULES.read_text(encoding="utf-8"))["rules"]


def paths_to_remove(answers: Mapping[str, Any], rules: Rules) -> list[str]:
    """The globs of every rule whose `when` matches `answers`."""
    return [
        pattern
        for rule in rules
        if all(answers.get(option) == value for option, value in rule["when"].items())
        for pattern in rule["remove"]
    ]


def _remove_empty_dirs(root: Path) -> None:
    """Remove the folders under `root` that hold nothing, deepest first."""
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()


def prune(project_dir: Path, answers: Mapping[str, Any], rules: Rules | None = None) -> list[Path]:
    """Remove what the rules (default: prune.json's) name for `answers`; return what went.

    Folders left empty go too.
    """
    removed = []
    for pattern in paths_to_remove(answers, default_rules() if rules is None else rules):
        for path in sorted(Path(project_dir).glob(pattern)):
            if not path.exists() and not path.is_symlink():
                continue  # inside a folder this pattern already removed
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    if removed:
        _remove_empty_dirs(Path(project_dir))
    return removed
