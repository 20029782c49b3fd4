"""The project the task tests run `invoke` in, as its user types it: the template's default
answers, baked once per test session into a temporary folder. Its tasks import this checkout's
cloudgpu (PYTHONPATH), so what runs is the source under test, not an installed release."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import cloudgpu.project

SOURCE = Path(cloudgpu.__file__).resolve().parents[1]
TEMPLATE_DIR = SOURCE.parents[1]
sys.path.insert(0, str(TEMPLATE_DIR))  # template_tools, when these tests run from cloudgpu/ alone

from template_tools import bake  # noqa: E402

PROJECT = "cloud-gpu-project"  # the default answers' slug and package
PACKAGE = "cloud_gpu_project"


def _bake() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="cloudgpu-tests-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    cwd = Path.cwd()
    try:
        return bake(TEMPLATE_DIR, folder, {})
    finally:
        os.chdir(cwd)  # cookiecutter works in the project's folder


PROJECT_ROOT = _bake()
# The project this process's cloudgpu reads (its image.json, its tasks' [tool.cloudgpu] table),
# as a project's tasks.py names it for the tasks it runs.
cloudgpu.project.ROOT = PROJECT_ROOT


def project_env(**overrides: str) -> dict[str, str]:
    """The environment for a task: this checkout's package first on the path, no GPUs, no
    tracking service."""
    path = os.pathsep.join([str(SOURCE), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}
    env["WANDB_MODE"] = "disabled"
    env.update(overrides)
    return env


def invoke_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300, cwd: Path = PROJECT_ROOT
) -> subprocess.CompletedProcess:
    """`invoke ARGS` in the project (or a copy of it, `cwd`); stdout and stderr apart."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=cwd,
        env=env or project_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
