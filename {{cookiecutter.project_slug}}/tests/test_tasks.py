"""The invoke tasks: quick to list, and they pass Hydra overrides through."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import PROJECT_ROOT, project_env, read_metrics

INVOKE = [sys.executable, "-m", "invoke"]


def invoke(*args: str, cwd: Path = PROJECT_ROOT, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*INVOKE, *args], cwd=cwd, env=project_env(**env), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


def test_tasks_import_nothing_heavy() -> None:
    """`invoke --list` must stay instant: the tasks may not import the framework, hydra or numpy."""
    code = (
        "import sys, tasks; from cloudgpu.tasks.project import framework; "
        "heavy = {framework.IMPORT, 'hydra', 'numpy'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_list_and_help() -> None:
    """The tasks this project declares (every task's own help: cloudgpu's tests)."""
    listed = invoke("--list")
    assert listed.returncode == 0
    for name in ("setup", "train", "evaluate", "crossval", "sweep", "test", "lint", "deploy"):
        assert name in listed.stdout
    helped = invoke("train", "--help")
    assert helped.returncode == 0 and "--gpus" in helped.stdout


def test_train_passes_overrides_through_each_as_given(tmp_path: Path) -> None:
    """Each override reaches Hydra as the shell handed it over: spaces, quotes, `$(...)` and
    `${...}` inside one stay in it, and no shell on the way runs or expands anything."""
    planted = tmp_path / "ran"
    result = invoke(
        "train", "--", "debug=fast", "logger=jsonl", f"hydra.run.dir={tmp_path / 'run'}",
        f"tags=[first tag,\"$(touch {planted})\",\"it's\"]",
        "trainer.max_epochs=${oc.env:EPOCHS,3}",
        EPOCHS="1",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert read_metrics(tmp_path / "run")["epochs"] == 1  # Hydra resolved ${oc.env:EPOCHS,3}
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert config["tags"] == ["first tag", f"$(touch {planted})", "it's"]
    assert not planted.exists()


def test_bad_gpu_count_is_refused() -> None:
    result = invoke("train", "--gpus", "0")
    assert result.returncode != 0
    assert "--gpus must be at least 1, got 0" in result.stderr


def test_bad_flags_get_one_line_naming_the_flag(tmp_path: Path) -> None:
    cases = {
        ("train", "--gpus", "two"): "--gpus 'two' is not a whole number; for example --gpus 1",
        ("crossval", "--folds", "1"): "--folds must be at least 2, got 1",
        ("evaluate",): "invoke evaluate needs --ckpt RUN_DIR",
        ("evaluate", "--ckpt", "no/such/run"): "--ckpt no/such/run: no such file or run directory",
        ("setup", "--cpu", "--no-cpu"): "--cpu and --no-cpu contradict each other",
        ("setup", "--cpu=false"): "--cpu is an on/off flag: give --cpu alone",
        ("sweep", "--search", "nope"): "--search nope: choose one of digits_optuna",
    }
    # A copy of the project, which the tests beside this one (xdist workers) do not write in.
    ignore = shutil.ignore_patterns("outputs", "multirun", ".git")
    project = Path(shutil.copytree(PROJECT_ROOT, tmp_path / "project", ignore=ignore))
    before = set(project.iterdir())
    for args, message in cases.items():
        result = invoke(*args, cwd=project)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stderr.startswith(f"error: {message}"), (args, result.stderr)  # one prefix
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert set(project.iterdir()) == before  # no outputs/ folder, nothing else


def test_overrides_before_the_dashes_are_shown_after_them() -> None:
    result = invoke("train", "--gpus", "2", "model=cnn", "--", "seed=3")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: 'model=cnn' is a Hydra override: put overrides after --, as in "
        "invoke train --gpus 2 -- model=cnn seed=3"
    )


def test_setup_takes_cpu_or_no_cpu_and_detects_without_either() -> None:
    from cloudgpu.tasks import run
    from cloudgpu.tasks.project import framework

    for flag, cpu in (("--cpu", True), ("--no-cpu", False)):
        result = invoke("--dry", "setup", flag)
        assert result.returncode == 0, result.stderr
        assert framework.setup_command(run.PYTHON, cpu) in result.stdout
    detected = invoke("--dry", "setup")
    assert detected.returncode == 0, detected.stderr
    has_gpu = shutil.which("nvidia-smi") is not None
    assert framework.setup_command(run.PYTHON, not has_gpu) in detected.stdout
    assert f"the {'CUDA' if has_gpu else 'CPU'} build" in detected.stdout
    helped = invoke("setup", "--help")
    assert (
        "--cpu " in helped.stdout and "--no-cpu " in helped.stdout and "STRING" not in helped.stdout
    )
