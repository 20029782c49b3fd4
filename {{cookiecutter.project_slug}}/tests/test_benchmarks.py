"""The GPU check (benchmarks/gpu_check.py) and the GPU throughput table it runs
(benchmarks/gpu.py), rehearsed as they will run on a GPU machine: here on the CPU, the benchmark
small, in fp32 and without {{ "XLA" if cookiecutter.framework == "tensorflow" else "torch.compile" }} (on a CPU both take minutes)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, project_env

STEPS = ["machine", "tests", "benchmark"]


@pytest.mark.slow
def test_the_gpu_check_rehearses_every_step_on_a_cpu(tmp_path: Path) -> None:
    command = [sys.executable, "benchmarks/gpu_check.py", "--device=cpu", f"--out={tmp_path}"]
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, env=project_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["rehearsal"], report["ok"]) == (True, True)
    steps = {step["name"]: step for step in report["steps"]}
    assert list(steps) == STEPS
    assert all(step["status"] == "passed" for step in steps.values()), steps
    assert report["machine"]["framework"].startswith("{{ "torch" if cookiecutter.framework == "pytorch" else "tensorflow" }} ")
    tests = report["tests"]
    assert tests["failed"] == [] and tests["skipped"], tests
    if shutil.which("nvidia-smi") is None:  # every gpu test skipped, saying why: none passed
        assert tests["passed"] == []
        assert all("CUDA GPU" in line for line in tests["skipped"]), tests["skipped"]
    # The benchmark's table, as printed, and its rows in the report.
    printed = [line.split() for line in steps["benchmark"]["output"].splitlines()
               if line.startswith(("in memory", "streamed"))]  # fmt: skip
    assert len(printed) == 2, steps["benchmark"]["output"]
    for row in printed:
        bare, ours, share = float(row[-5]), float(row[-4]), float(row[-3])
        assert bare > 0 and ours > 0 and share == pytest.approx(ours / bare, rel=0.05)
        assert row[-2:] == ["n/a", "n/a"]  # no GPU to be busy
    rows = report["benchmark"]["rows"]
    assert [row["data"] for row in rows] == ["in memory", "streamed"]
    for row in rows:
        # The report rounds samples/s to 0.1 and the ratio (of the unrounded rates) to 1e-4: at
        # the low rates of a loaded CPU, the rounded rates' ratio can differ by more than 1e-3.
        ours, bare = row["trainer_samples_per_s"], row["bare_samples_per_s"]
        low, high = (ours - 0.05) / (bare + 0.05), (ours + 0.05) / (bare - 0.05)
        assert low - 5e-5 <= row["trainer_over_bare"] <= high + 5e-5, row
        assert row["gpu_busy_trainer_pct"] is None
    assert report["targets"] == [], "a rehearsal measures no target"
    text = (tmp_path / "report.txt").read_text()
    assert "A REHEARSAL ON THE CPU" in text and text.rstrip().endswith("OK")
    assert text in done.stdout


def test_the_gpu_checks_tests_are_collected_without_the_cloudgpu_package() -> None:
    """The GPU image has src/ and its locks only: the modules the check runs must import without
    cloudgpu (made unimportable here), and they hold the GPU tests."""
    sys.path.insert(0, str(PROJECT_ROOT / "benchmarks"))
    try:
        from gpu_check import gpu_test_modules
    finally:
        sys.path.pop(0)
    modules = gpu_test_modules()
    assert "tests/test_gpu.py" in modules and "tests/test_deploy.py" not in modules
    code = (
        "import sys, pytest; sys.modules['cloudgpu'] = None; "
        "sys.exit(pytest.main(['--collect-only', '-q', '-m', 'gpu', '-p', 'no:cacheprovider', "
        "'-p', 'no:xdist', *sys.argv[1:]]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *modules], cwd=PROJECT_ROOT, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert "test_gpu.py::" in done.stdout


def test_the_gpu_check_without_a_gpu_stops_in_one_line(tmp_path: Path) -> None:
    """`invoke gpu-check` and the script it runs, where nvidia-smi is not on the PATH: exit 2,
    one line naming the rehearsal, nothing made."""
    env = project_env(PATH=str(Path(sys.executable).parent))  # this Python, no nvidia-smi
    out = tmp_path / "report"
    for command in (
        [sys.executable, "-m", "invoke", "gpu-check", "--out", str(out)],
        [sys.executable, "benchmarks/gpu_check.py", "--out", str(out)],
    ):
        done = subprocess.run(
            command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        said = (done.stdout + done.stderr).strip().splitlines()
        assert done.returncode == 2 and len(said) == 1, done.stdout + done.stderr
        assert said[0].startswith("error: no NVIDIA GPU here (nvidia-smi not found)")
        assert "--device cpu" in said[0]
        assert not out.exists()


def test_the_gpu_check_runs_in_this_revisions_gpu_image_unless_told_here(tmp_path: Path) -> None:
    """What `invoke gpu-check` would run, as --dry-run prints it (no GPU needed): this revision's
    GPU image, the one `invoke train --cloud` pushes, built first if missing; --here, this
    Python. Nothing is made."""
    out = tmp_path / "report"

    def dry_run(*args: str) -> list[str]:
        command = [sys.executable, "-m", "invoke", "gpu-check", "--dry-run", f"--out={out}", *args]
        env = project_env()
        done = subprocess.run(
            command, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip().splitlines()

    build, run = dry_run()
    image = build.removeprefix("$ invoke build   # unless ").removesuffix(" is built")
    assert image.startswith("{{ cookiecutter.project_slug }}:") and image.endswith("-gpu"), build
    docker = shlex.split(run.removeprefix("$ "))
    assert docker[1:3] == ["run", "--rm"] and "--gpus=all" in docker, run
    assert docker[docker.index("--entrypoint=bash") + 1] == image
    assert f"--volume={out}:/out" in docker and docker[-1].endswith("--out /out")
    here = [sys.executable, "benchmarks/gpu_check.py", "--out", str(out)]
    assert dry_run("--here") == [f"$ {shlex.join(here)}"]
    assert not out.exists()
