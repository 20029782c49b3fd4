"""The template's own invoke tasks answer bad input with the value and the choices, exit 2 and
write nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEMPLATE_DIR

BUILD = TEMPLATE_DIR / "build"


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=TEMPLATE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
    )


def listing() -> set[Path]:
    """What `invoke bake` and `invoke bench` make: folders under build/bake/ and build/bench/."""
    return {path for folder in (BUILD / "bake", BUILD / "bench") if folder.is_dir()
            for path in folder.iterdir()}  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["bake", "-a", "nope=1"], "unknown option 'nope'; the options are: project_name,"),
        (["bake", "-a", "tracking"], "'tracking' is not key=value"),
        (["bake", "-a", "framework=jax"], "framework='jax' is not a choice; choose one of: py"),
        (["bake", "-a", "project_slug=1abc"], "project_slug '1abc' must start with a letter"),
        (["bench", "fast"], "unknown benchmark 'fast'; choose one of: loop, keras, image"),
    ],
    ids=["unknown-option", "not-key-value", "bad-choice", "bad-slug", "unknown-benchmark"],
)
def test_bad_input_names_the_value_and_writes_nothing(args: list[str], message: str) -> None:
    before = listing()
    done = invoke(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert listing() == before
