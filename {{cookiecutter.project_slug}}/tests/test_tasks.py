"""The invoke tasks: quick to list, and they pass Hydra overrides through."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import PROJECT_ROOT, project_env, read_metrics

INVOKE = [sys.executable, "-m", "invoke"]


def invoke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*INVOKE, *args], cwd=PROJECT_ROOT, env=project_env(), capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip


def test_tasks_import_nothing_heavy() -> None:
{%- set framework_module = "tensorflow" if cookiecutter.framework == "tensorflow" else "torch" %}
    """`invoke --list` must stay instant: tasks.py may not import {{ framework_module }}, hydra or numpy."""
    code = (
        "import sys, tasks; heavy = {'{{ framework_module }}', 'hydra', 'numpy'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_list_and_help() -> None:
    listed = invoke("--list")
    assert listed.returncode == 0
    for name in ("setup", "train", "evaluate", "crossval", "sweep", "test", "lint"):
        assert name in listed.stdout
    helped = invoke("train", "--help")
    assert helped.returncode == 0 and "--gpus" in helped.stdout


def test_train_passes_overrides_through(tmp_path: Path) -> None:
    result = invoke("train", "--", "debug=fast", "logger=jsonl", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 0, result.stderr
    assert read_metrics(tmp_path)["epochs"] == 1


def test_bad_gpu_count_is_refused() -> None:
    result = invoke("train", "--gpus", "0")
    assert result.returncode != 0
    assert "--gpus must be at least 1, got 0" in result.stderr
{%- if cookiecutter.framework == "pytorch" %}


def test_setup_adds_the_cpu_index_only_where_it_resolves(monkeypatch, capsys) -> None:
    """An index whose host has no address would make pip retry it for minutes."""
    from invoke import MockContext, Result

    import tasks

    commands = {}
    for index in ("https://localhost/whl/cpu", "https://pytorch.invalid/whl/cpu"):
        monkeypatch.setattr(tasks, "CPU_TORCH_INDEX", index)
        context = MockContext(run=Result(), repeat=True)
        tasks.setup(context, cpu=True)
        commands[index] = context.run.call_args.args[0]
    resolves, unresolved = commands.values()
    assert "--extra-index-url https://localhost/whl/cpu -e '.[dev]'" in resolves
    assert "--extra-index-url" not in unresolved
    assert "https://pytorch.invalid/whl/cpu does not resolve" in capsys.readouterr().out
{%- endif %}
