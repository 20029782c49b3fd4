"""Shared helpers: run the entry points as a user would, in a subprocess, on the CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PACKAGE = "{{ cookiecutter.package_name }}"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = PROJECT_ROOT / "configs"
# A few small deterministic epochs on the CPU with local logging only.
SHORT = ["debug=short", "logger=jsonl"]


def project_env(**overrides: str) -> dict[str, str]:
    """The environment for a subprocess{% if cookiecutter.tracking == "wandb" %}: wandb disabled unless a test turns it on{% endif %}."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"{% if cookiecutter.tracking == "wandb" %}, "WANDB_MODE": "disabled"{% endif %}}
    env.update(overrides)
    return env


def module_command(module: str, *overrides: str) -> list[str]:
    return [sys.executable, "-m", f"{PACKAGE}.{module}", *overrides]


def run_module(
    module: str, *overrides: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run `python -m PACKAGE.<module> overrides...` from the project root.

    stdout and stderr come back merged in `.stdout`, in the order a user would see them.
    """
    return subprocess.run(
        module_command(module, *overrides),
        cwd=PROJECT_ROOT,
        env=env or project_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def train(run_dir: Path, *overrides: str, **kwargs: object) -> subprocess.CompletedProcess:
    """Train into `run_dir` and fail the test with the output if the run fails."""
    result = run_module("train", *overrides, f"hydra.run.dir={run_dir}", **kwargs)
    assert result.returncode == 0, result.stdout
    return result


def kill_mid_save(script: str, path: Path) -> None:
    """Run `script` (which saves a checkpoint to argv[1] over and over, printing a line after each
    save) and SIGKILL it during a save that follows a few completed ones."""
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True
    )
    for _ in range(3):
        process.stdout.readline()
    time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture(scope="session")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short training run that several tests read from."""
    run_dir = tmp_path_factory.mktemp("short_run")
    train(run_dir, *SHORT)
    return run_dir
