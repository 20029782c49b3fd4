"""Developing the project: its tests and its linters."""

from __future__ import annotations

from invoke import Context, task

from .args import overrides
from .run import PYTHON, _pty


@task
def test(c: Context) -> None:
    """Run the test suite on the CPU; pytest arguments go after `--`."""
    c.run(f"{PYTHON} -m pytest {overrides(c)}", pty=_pty())


@task
def lint(c: Context) -> None:
    """Check style and common bugs with ruff, and the types with mypy."""
    c.run(f"{PYTHON} -m ruff check .")
    c.run(f"{PYTHON} -m ruff format --check .")
    c.run(f"{PYTHON} -m mypy")


@task(name="format")
def format_(c: Context) -> None:
    """Rewrite the code in ruff's style and apply safe fixes."""
    c.run(f"{PYTHON} -m ruff check --fix .")
    c.run(f"{PYTHON} -m ruff format .")
