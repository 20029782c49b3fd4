"""Shared helpers: run the entry points as a user would, in a subprocess, on the CPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The tests send Ctrl-C (SIGINT) to what they start. A shell that ran this suite in the background
# left SIGINT ignored, which every child would inherit and so never see Ctrl-C: take it back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The tests train side by side (a pytest-xdist worker a core, and the trainers they start), so
# there are more OpenMP threads than cores. An OpenMP thread spins while it waits for the
# others, taking the core the thread it waits for needs: 4 short trainings at once took 22 s
# here, 7 s with waiting threads asleep. Alone on a machine spinning is faster (2x on the small
# MLP), so only the tests set this, before the framework is imported; the trainer does not.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


PACKAGE = "{{ cookiecutter.package_name }}"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = PROJECT_ROOT / "configs"
# A few small deterministic epochs on the CPU with local logging only.
SHORT = ["debug=short", "logger=jsonl"]
# Long enough to be interrupted mid-run; deterministic so two runs can be compared exactly.
RESUMABLE = [
    *SHORT,
    "trainer.max_epochs=6",
    "trainer.limit_train_batches=null",
    "trainer.log_every_n_steps=1",
]


def cuda_gpus() -> int:
    """The CUDA GPUs here, as `nvidia-smi -L` lists them: 0 without a driver."""
    if shutil.which("nvidia-smi") is None:
        return 0
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    listed = done.stdout.splitlines() if done.returncode == 0 else []
    return sum(line.startswith("GPU ") for line in listed)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip, saying why, the tests marked `gpu(N)` where fewer than N CUDA GPUs are present, and
    those marked `needs(...)` where a tool they need is missing (cloudgpu.testing.needs)."""
    found = cuda_gpus() if any(item.get_closest_marker("gpu") for item in items) else 0
    for item in items:
        marker = item.get_closest_marker("gpu")
        needed = marker.args[0] if marker and marker.args else 1
        if marker and found < needed:
            reason = f"needs {needed} CUDA GPU{'s' * (needed > 1)}; this machine has {found}"
            item.add_marker(pytest.mark.skip(reason=reason))
    if any(item.get_closest_marker("needs") for item in items):
        # Imported here: the GPU check collects its tests in the image, which has no cloudgpu.
        from cloudgpu.testing import needs

        needs.skip_missing(items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("needs"):
        from cloudgpu.testing import needs

        needs.fail_missing_in_ci(item)


def project_env(**overrides: str) -> dict[str, str]:
    """The environment for a subprocess: the GPUs hidden, so the CPU tests train on the CPU on a
    GPU machine too (gpu_env for the `gpu` tests){% if cookiecutter.tracking == "wandb" %}; wandb disabled unless a test turns it on{% endif %}."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}
{%- if cookiecutter.tracking == "wandb" %}
    env["WANDB_MODE"] = "disabled"
{%- endif %}
    env.update(overrides)
    return env


def gpu_env(**overrides: str) -> dict[str, str]:
    """project_env with the GPUs this shell sees."""
    env = project_env(**overrides)
    if "CUDA_VISIBLE_DEVICES" not in overrides:
        env.pop("CUDA_VISIBLE_DEVICES")
        if "CUDA_VISIBLE_DEVICES" in os.environ:
            env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
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


def invoke_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`invoke ARGS` as a user types it, in the project; stdout and stderr apart."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=PROJECT_ROOT,
        env=env or project_env(),
        capture_output=True,
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


def start_training(
    run_dir: Path, *overrides: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """A resumable training run in the background."""
    return subprocess.Popen(
        module_command("train", *RESUMABLE, *overrides, f"hydra.run.dir={run_dir}"),
        cwd=PROJECT_ROOT,
        env=env or project_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for_steps(run_dir: Path, steps: int, process: subprocess.Popen) -> None:
    """Block until metrics.jsonl shows `steps` logged steps (training is well under way)."""
    log = run_dir / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= steps:
            return
        time.sleep(0.02)
    raise AssertionError(f"training never reached {steps} steps: {process.communicate()[0]}")


def interrupt(
    run_dir: Path,
    sig: signal.Signals,
    after_steps: int,
    *overrides: str,
    env: dict[str, str] | None = None,
) -> tuple[int, float, str]:
    """Start a run, send `sig` after some steps; return exit code, seconds to exit, output."""
    process = start_training(run_dir, *overrides, env=env)
    wait_for_steps(run_dir, after_steps, process)
    sent = time.monotonic()
    process.send_signal(sig)
    output, _ = process.communicate(timeout=60)
    return process.returncode, time.monotonic() - sent, output


def copy_of(run: Path, into: Path) -> Path:
    """A copy of a run folder (the short run, say), named `into`."""
    subprocess.run(["cp", "-r", str(run), str(into)], check=True)
    return into


def read_metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())


@pytest.fixture(scope="session")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short training run that several tests read from; what it printed is beside it, in
    short_run.stdout (the short_run_stdout fixture)."""
    run_dir = tmp_path_factory.mktemp("short_run")
    result = train(run_dir, *SHORT)
    (run_dir.parent / "short_run.stdout").write_text(result.stdout)
    return run_dir


@pytest.fixture(scope="session")
def exported_run(short_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the short run with its model/ exported (invoke export), for the tests that
    deploy a run and test something other than its export, which costs seconds of CPU: once."""
    run = copy_of(short_run, tmp_path_factory.mktemp("exported") / "run")
    done = invoke_cli("export", f"--run={run}")
    assert done.returncode == 0, done.stdout + done.stderr
    return run


@pytest.fixture(scope="session")
def short_run_stdout(short_run: Path) -> str:
    return (short_run.parent / "short_run.stdout").read_text()
