"""The cloudgpu package's own tests (cloudgpu/tests, with the package's pytest settings) run once
a session, in a process of their own beside the rest, as the projects' suites do: they drive a
baked project's tasks against the clouds' stand-ins and spend much of their time waiting on the
clouds' CLIs, so beside the Docker tests they add little to the session; in its line they added
their whole time (about 10 minutes on 2 cores)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TEMPLATE_DIR

TIMEOUT = 2400  # seconds; alone on 2 cores they take about 8 minutes
LOG = TEMPLATE_DIR / ".cache" / "suite-logs" / "cloudgpu.log"


class PackageSuite:
    def __init__(self, log: Path) -> None:
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
                   "--durations=15", "cloudgpu/tests"]  # fmt: skip
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                command, cwd=TEMPLATE_DIR, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def result(self) -> tuple[int, str]:
        try:
            code = self.process.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        return code, self.log.read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="session")
def package_suite() -> Iterator[PackageSuite]:
    suite = PackageSuite(LOG)
    yield suite
    if suite.process.poll() is None:  # nothing left behind
        suite.process.kill()
        suite.process.wait()


def test_the_package_suite_starts(package_suite: PackageSuite) -> None:
    """Among the first tests of a session (conftest.py orders them); its result is read last."""
    assert package_suite.process.pid > 0


@pytest.mark.timeout(TIMEOUT + 60)
def test_the_package_tests_pass(package_suite: PackageSuite) -> None:
    code, output = package_suite.result()
    assert code == 0, f"{LOG}:\n{output[-8000:]}"
    assert " passed" in output.splitlines()[-1] and "tests/test_cloud_aws.py" in output
    if os.environ.get("CI"):  # in CI nothing is skipped
        assert [line for line in output.splitlines() if line.startswith("SKIPPED")] == []
