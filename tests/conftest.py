"""Shared fixtures: every variant baked once per session, and a git history of the template."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from template_tools import bake, variants
from template_tools.variants import Variant

# The tests send Ctrl-C (SIGINT) to what they start. A shell that ran this suite in the background
# left SIGINT ignored, which every child would inherit and so never see Ctrl-C: take it back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# What this session starts trains side by side on the machine's cores (the projects' suites,
# the demo, the Docker tests' containers): OpenMP threads that spin while they wait would take
# the cores the others need (the projects' tests/conftest.py has the numbers).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

TEMPLATE_DIR = Path(__file__).resolve().parent.parent
# The tasks of a baked project import the cloudgpu package it pins. Where these tests run a
# project's tasks with this Python (invoke --list, the Docker tests), the package is this
# checkout's source; the projects' own suites run in venvs with the wheel built from it.
PACKAGE_SOURCE = TEMPLATE_DIR / "cloudgpu" / "src"
os.environ["PYTHONPATH"] = os.pathsep.join(
    [str(PACKAGE_SOURCE), *filter(None, [os.environ.get("PYTHONPATH")])]
)
PROJECT_TEMPLATE = "{{cookiecutter.project_slug}}"
VARIANTS = variants(TEMPLATE_DIR)

# The "older" template of the update tests: the current tree with these changes.
OLD_EDITS = [  # (file in the project template, line pattern, its text in the older template)
    ("_pytorch/configs/optimizer/adamw.yaml", r"^lr: .*$", "lr: 0.001"),
    (".gitignore", r"^/multirun/\n", ""),
]
OLD_ABSENT = ["configs/debug/overfit.yaml"]  # added by the newer template

# Commits must not depend on the user's git identity or signing setup.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Template Tests",
    "GIT_AUTHOR_EMAIL": "tests@example.com",
    "GIT_COMMITTER_NAME": "Template Tests",
    "GIT_COMMITTER_EMAIL": "tests@example.com",
}


def git(cwd: Path, *args: str) -> str:
    """Run git in `cwd` and return its output; fail the test on an error."""
    done = subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    """Commit everything in `repo`; return the commit's hash."""
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


# Tests that start work in the background run first, those that wait for it last, so that the
# rest of the session (the Docker tests among it) runs meanwhile.
STARTS_WORK = ("test_every_suite_starts", "test_the_package_suite_starts")
WAITS_FOR_IT = (
    "test_the_projects_own_tests_pass",
    "test_the_first_tier_is_what_invoke_test_runs",
    "test_the_package_tests_pass",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def place(item: pytest.Item) -> int:
        name = getattr(item, "originalname", item.name)
        return 0 if name.startswith(STARTS_WORK) else 2 if name.startswith(WAITS_FOR_IT) else 1

    items.sort(key=place)  # stable: the rest keeps its order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """In CI (CI=true) nothing is skipped: a skip is a failure that keeps its reason."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where everything must run: {report.longrepr}"


@pytest.fixture(scope="session")
def baked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every variant, baked once with cookiecutter: variant id -> project folder."""
    root = tmp_path_factory.mktemp("variants")
    return {v.id: bake(TEMPLATE_DIR, root / v.id, v.extra_context) for v in VARIANTS}


@pytest.fixture(params=VARIANTS, ids=[v.id for v in VARIANTS])
def variant(request: pytest.FixtureRequest) -> Variant:
    """Each variant in turn."""
    return request.param


@pytest.fixture
def project(baked: dict[str, Path], variant: Variant) -> Path:
    """The baked project of the current variant. Tests must leave it as they found it."""
    return baked[variant.id]


@pytest.fixture(scope="session")
def default_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project `cookiecutter --no-input` makes from the default answers."""
    return bake(TEMPLATE_DIR, tmp_path_factory.mktemp("default"), {})


@dataclass(frozen=True)
class TemplateRepo:
    """A git repository of the template with an older and a newer (the current) commit."""

    path: Path
    old: str
    new: str


def _copy_working_tree(source: Path, target: Path) -> None:
    """Copy the files git would track in `source` (committed or not, ignored ones left out)."""
    listed = git(source, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        if (source / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / name, target / name)


def _make_older(template: Path) -> None:
    """Turn the template at `template` into its "older" version (OLD_EDITS, OLD_ABSENT)."""
    project = template / PROJECT_TEMPLATE
    for name, pattern, old_text in OLD_EDITS:
        path = project / name
        text, count = re.subn(pattern, old_text, path.read_text(), count=1, flags=re.MULTILINE)
        assert count == 1, f"OLD_EDITS: {pattern!r} not found in {name}; update the edit"
        path.write_text(text)
    for name in OLD_ABSENT:
        (project / name).unlink()


@pytest.fixture(scope="session")
def template_repo(tmp_path_factory: pytest.TempPathFactory) -> TemplateRepo:
    """The template as a git history: `old` (the current tree, edited) then `new` (current)."""
    repo = tmp_path_factory.mktemp("template")
    git(repo, "init", "-q", "-b", "main")
    _copy_working_tree(TEMPLATE_DIR, repo)
    _make_older(repo)
    old = commit_all(repo, "older template")
    _copy_working_tree(TEMPLATE_DIR, repo)
    new = commit_all(repo, "current template")
    return TemplateRepo(repo, old, new)
