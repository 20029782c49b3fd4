"""What to type after a project is made, printed by the post-generation hook."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Set by template_tools.bake(): the template's own tasks and tests print their own next steps.
QUIET_ENV = "CLOUD_GPU_TEMPLATE_QUIET"


def _inside_git_repository(folder: Path) -> bool:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"],
            cwd=folder,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:  # no git at all: it needs `git init` too
        return False
    return done.returncode == 0 and done.stdout.strip() == "true"


def _where(project_dir: Path) -> str:
    """`project_dir` as the user's shell reaches it: relative to their folder when inside it."""
    shell = Path(os.environ.get("PWD") or Path.cwd()).resolve()
    project = project_dir.resolve()
    return str(project.relative_to(shell)) if project.is_relative_to(shell) else str(project)


def next_steps(project_dir: Path) -> str:
    """The commands that take a new project from here to its first training run."""
    lines = [f"Made {project_dir.name}/. Next:", f"  cd {_where(project_dir)}"]
    if not _inside_git_repository(project_dir):
        lines.append('  git init && git add -A && git commit -m "New project from the template"')
    lines += [
        "  python3 -m venv .venv && . .venv/bin/activate",
        "  pip install invoke && invoke setup      # the project, its tools, CPU or GPU framework",
        "  invoke train                            # trains on the bundled digits in about 10 s",
    ]
    return "\n".join(lines)
