"""Shape the generated project for the answers given, as listed in prune.json.

Each rule applies when every option in its `when` has that value: first `move` lays a folder of
files over the project (each file to the same place under the target; `{option}` in the folder's
name is that answer), then `remove` deletes the files of choices not taken (globs). An overlay
adds files: it never replaces one, so a file is either shared or of one choice, never both.
Folders left empty go too.
"""

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
    """The rules from prune.json: [{"when": {option: value}, "remove": [glob], "move": {a: b}}]."""
    return json.loads(RULES.read_text(encoding="utf-8"))["rules"]


def matching(answers: Mapping[str, Any], rules: Rules) -> Rules:
    """The rules whose `when` matches `answers`, in order."""
    return [
        rule
        for rule in rules
        if all(answers.get(option) == value for option, value in rule["when"].items())
    ]


def _remove(project_dir: Path, patterns: list[str]) -> list[Path]:
    removed = []
    for pattern in patterns:
        for path in sorted(project_dir.glob(pattern)):
            if not path.exists() and not path.is_symlink():
                continue  # inside a folder this pattern already removed
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
    return removed


def _move(project_dir: Path, source: str, target: str) -> list[Path]:
    """Move `source` (a file, or every file under a folder) to `target`; return the new paths."""
    source_path, target_path = project_dir / source, project_dir / target
    if not source_path.exists():
        raise FileNotFoundError(f"prune.json moves {source!r}, which the template does not have")
    if source_path.is_file():
        pairs = [(source_path, target_path)]
    else:
        files = (p for p in sorted(source_path.rglob("*")) if p.is_file())
        pairs = [(path, target_path / path.relative_to(source_path)) for path in files]
    moved = []
    for path, destination in pairs:
        if destination.exists():
            raise FileExistsError(
                f"prune.json moves {path.relative_to(project_dir)} over the shared "
                f"{destination.relative_to(project_dir)}: a file belongs to the overlay or to the "
                "shared template, not both"
            )
        destination.parent.mkdir(parents=True, exist_ok=True)
        path.replace(destination)
        moved.append(destination)
    return moved


def _remove_empty_dirs(root: Path) -> None:
    """Remove the folders under `root` that hold nothing, deepest first."""
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()


def prune(project_dir: Path, answers: Mapping[str, Any], rules: Rules | None = None) -> list[Path]:
    """Apply the rules (default: prune.json's) that match `answers`; return what was removed.

    The moves of every matching rule come first, then the removals, so a removal also reaches
    files an overlay brought. Folders left empty go too.
    """
    project_dir = Path(project_dir)
    chosen = matching(answers, default_rules() if rules is None else rules)
    moved = [
        path
        for rule in chosen
        for source, target in rule.get("move", {}).items()
        for path in _move(project_dir, source.format(**answers), target)
    ]
    removed = _remove(project_dir, [p for rule in chosen for p in rule.get("remove", [])])
    if removed or moved:
        _remove_empty_dirs(project_dir)
    return removed
