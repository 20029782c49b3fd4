"""What a test needs beyond Python, and where to get it: `@pytest.mark.needs(NAME)`.

A project's `invoke test` leaves these tests out (and the `slow` ones): it runs in minutes with
nothing but the project installed. `invoke test --all` runs them too, and a test whose need is
missing is skipped with a line naming it and how to install it. In CI nothing may be skipped
but the GPU tests (a project's .github/workflows/ci.yml installs all of these). The package's
own tests (cloudgpu/tests) mark their needs the same way.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable

import pytest

from . import iam


def _on_path(*programs: str) -> Callable[[], bool]:
    return lambda: all(shutil.which(program) for program in programs)


# name -> (is it here?, how to get it)
NEEDS: dict[str, tuple[Callable[[], bool], str]] = {
    "aws": (_on_path("aws", "moto_server"), "pip install awscli 'moto[server]'"),
    "gcloud": (_on_path("gcloud"), "the Google Cloud CLI (https://cloud.google.com/sdk)"),
    "az": (
        lambda: bool(os.environ.get("AZ_CLI") or shutil.which("az")),
        "pip install azure-cli, or AZ_CLI=the path of an az",
    ),
    "cloud-sdks": (
        lambda: bool(os.environ.get("CLOUD_SDK_PYTHON")),
        "CLOUD_SDK_PYTHON=a Python with azure-ai-ml, google-cloud-aiplatform and skypilot",
    ),
    "iam-linters": (
        iam.available,
        "CLOUD_SDK_PYTHON=a Python with parliament and cloudsplaining (pip install both)",
    ),
    "prometheus": (
        _on_path("prometheus", "promtool", "prometheus-pushgateway", "prometheus-node-exporter"),
        "apt-get install prometheus prometheus-pushgateway prometheus-node-exporter",
    ),
}


def missing(names: tuple[str, ...]) -> str | None:
    """The skip reason for a test that needs `names`, or None when all of them are here."""
    unknown = [name for name in names if name not in NEEDS]
    if unknown:
        raise ValueError(f"needs({', '.join(unknown)}): known needs are {', '.join(NEEDS)}")
    absent = [name for name in names if not NEEDS[name][0]()]
    if not absent:
        return None
    return "needs " + "; ".join(f"{name} ({NEEDS[name][1]})" for name in absent)


MISSING_IN_CI = pytest.StashKey[str]()


def skip_missing(items: Iterable[pytest.Item]) -> None:
    """Skip, saying why, each item whose needs are missing here. In CI (CI set), which installs
    every tool, it fails instead (fail_missing_in_ci)."""
    for item in items:
        names = tuple(name for mark in item.iter_markers("needs") for name in mark.args)
        reason = missing(names) if names else None
        if reason and os.environ.get("CI"):
            item.stash[MISSING_IN_CI] = reason
        elif reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def fail_missing_in_ci(item: pytest.Item) -> None:
    if MISSING_IN_CI in item.stash:
        pytest.fail(f"CI is set and this test {item.stash[MISSING_IN_CI]}", pytrace=False)


# As a pytest plugin (`-p cloudgpu.testing.needs`: the package's own tests, run alone).
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip_missing(items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    fail_missing_in_ci(item)
