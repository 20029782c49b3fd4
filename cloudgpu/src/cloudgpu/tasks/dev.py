"""Developing the project: its tests and its linters."""

from __future__ import annotations

import importlib.util
import shlex

from invoke import Context, Exit, task

from .args import overrides
from .run import PYTHON, _pty

# What `invoke test` runs: all but what it leaves to `invoke test --all`, the tests that train
# for long or start several processes, and those needing tools beyond Python
# (cloudgpu.testing.needs).
FIRST_TIER = "not slow and not needs"
# The tests run side by side on the machine's cores (pytest-xdist; a worker out of tests takes
# some of another's), at most 8: each worker imports the framework and makes the session's short
# run once. `invoke test -- -n 0` runs them one by one.
PARALLEL = "-n auto --maxprocesses=8 --dist worksteal"


@task(
    help={
        "all_": "also the slow tests and those needing tools beyond Python (the AWS CLI with "
        "moto, gcloud, az, Prometheus), as CI runs them; a missing tool is named in a skip",
    }
)
def test(c: Context, all_: bool = False) -> None:
    """Run the tests on the CPU (minutes, nothing but Python); pytest arguments go after `--`."""
    selection = "" if all_ else f"-m {shlex.quote(FIRST_TIER)}"
    parallel = PARALLEL if importlib.util.find_spec("xdist") else ""
    if not parallel:
        print("note: pytest-xdist is not installed, so the tests run one by one (invoke setup)")
    done = c.run(f"{PYTHON} -m pytest {parallel} {selection} {overrides(c)}", pty=_pty(), warn=True)
    if not all_:
        print("the slow tests and those that need tools beyond Python: invoke test --all")
    if done is not None and done.failed:
        raise Exit(code=done.exited)


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
