"""The template's own invoke tasks answer bad input with the value and the choices, exit 2 and
write nothing."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import TEMPLATE_DIR
from helpers import commands

BUILD = TEMPLATE_DIR / "build"


def invoke(*args: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return commands.invoke(TEMPLATE_DIR, *args, timeout=timeout)


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
        (
            ["bench", "fast"],
            "unknown benchmark 'fast'; choose one of: loop, keras, image, launch, streaming, "
            "monitoring, monitoring-keras, scaling, cpu-scaling, serving",
        ),
    ],
    ids=["unknown-option", "not-key-value", "bad-choice", "bad-slug", "unknown-benchmark"],
)
def test_bad_input_names_the_value_and_writes_nothing(args: list[str], message: str) -> None:
    before = listing()
    done = invoke(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert listing() == before


def test_demo_trains_with_the_overrides_and_a_rebake_keeps_the_runs(tmp_path: Path) -> None:
    """The README's main job, twice: the second run rebakes, keeps the first run and the venv."""
    demo = ["demo", "--output-dir", str(tmp_path), "--"]
    first = invoke(*demo, "trainer.max_epochs=1", timeout=1200)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    project = tmp_path / "cloud-gpu-project"
    (run,) = (project / "outputs" / "train").iterdir()
    assert json.loads((run / "metrics.json").read_text())["epochs"] == 1
    # The run's own summary, then only what it leaves out: the project and what to type next.
    summary = re.search(r"^  test/accuracy +0\.\d{4}$", first.stdout, re.MULTILINE)
    assert summary, first.stdout[-3000:]
    assert f"next     cd {project} && .venv/bin/invoke --list" in first.stdout
    assert first.stdout.count("test/accuracy") == 1

    second = invoke(*demo, "trainer.max_epochs=2", timeout=600)
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert "keeping outputs, .venv (1 earlier runs)" in second.stdout
    runs = sorted((project / "outputs" / "train").iterdir())
    assert runs[0] == run and len(runs) == 2
    assert json.loads((runs[1] / "metrics.json").read_text())["epochs"] == 2
