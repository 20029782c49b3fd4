"""The answers record, .cruft.json, that lets `cruft update` bring a project up to date.

`cruft create` writes it itself; for a project made with plain `cookiecutter` the post-gen hook
writes the same record, so both kinds of project update the same way.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cookiecutter.config import BUILTIN_ABBREVIATIONS
from cookiecutter.repository import expand_abbreviations, is_repo_url

CRUFT_FILE = ".cruft.json"
# Context keys cookiecutter adds that describe one run on one machine, not the answers.
RUN_KEYS = frozenset({"_output_dir", "_repo_dir", "_checkout"})
# Context keys cruft sets itself, last.
CRUFT_KEYS = frozenset({"_template", "_commit"})


def _git(folder: Path, *args: str) -> str | None:
    """`git args` run in `folder`: its output, or None when git or the checkout is missing."""
    try:
        done = subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def template_source(template: str, template_dir: Path) -> tuple[str, str | None]:
    """Where cruft should fetch the template, and the folder in it that holds cookiecutter.json.

    `template` is what cookiecutter was given: a URL or abbreviation (gh:owner/repo) is kept,
    expanded; a local path becomes the absolute path of its git checkout, as cruft records it.
    """
    prefix = _git(template_dir, "rev-parse", "--show-prefix")
    directory = (prefix or "").rstrip("/") or None
    url = expand_abbreviations(template, BUILTIN_ABBREVIATIONS)
    if is_repo_url(url):
        # cookiecutter's "git+" names the tool; git itself cannot clone such a URL.
        return url.removeprefix("git+"), directory
    top = _git(template_dir, "rev-parse", "--show-toplevel")
    return str(Path(top or template_dir).resolve()), directory


def answers_record(answers: Mapping[str, Any], template_dir: Path) -> dict[str, Any]:
    """The .cruft.json content `cruft create` would write for `answers` (the hook's context)."""
    template, directory = template_source(answers["_template"], template_dir)
    commit = _git(template_dir, "rev-parse", "HEAD")
    # cruft keeps cookiecutter.json's order, then its own two keys; the hook's copy is sorted.
    spec = list(json.loads((Path(template_dir) / "cookiecutter.json").read_text("utf-8")))
    ordered = sorted(answers, key=lambda key: spec.index(key) if key in spec else len(spec))
    context = {key: answers[key] for key in ordered if key not in RUN_KEYS | CRUFT_KEYS}
    context.update(_template=template, _commit=commit)
    return {
        "template": template,
        "commit": commit,
        "checkout": answers.get("_checkout"),
        "context": {"cookiecutter": context},
        "directory": directory,
    }


def write_answers_record(
    project_dir: Path, answers: Mapping[str, Any], template_dir: Path
) -> Path | None:
    """Write .cruft.json unless it exists or cruft is generating (cruft writes its own).

    Cruft puts `_commit` in the context; plain cookiecutter does not.
    """
    path = Path(project_dir) / CRUFT_FILE
    if path.exists() or "_commit" in answers:
        return None
    record = answers_record(answers, template_dir)
    # The same layout as cruft's own json_dumps, so an update rewrites no more than it must.
    path.write_text(
        json.dumps(record, ensure_ascii=False, indent=2, separators=(",", ": ")) + "\n",
        encoding="utf-8",
    )
    return path
