"""The generated projects' shared virtual environments: one per framework, made with
`python -m venv` and an editable install of `<project>[dev]` of the variant with the most
dependencies, cached under .cache/ by a hash of those dependencies. uv installs them, from pip's
configured sources and choosing as pip does, in a tenth of pip's time; the pip command a user
types is run by `invoke demo`'s test. test_generated_projects.py runs each variant's suite in
one; .ci/run starts making them while the rest of CI is set up:

    python -c 'import sys; sys.path[:0] = [".", "tests"]; from helpers import venvs; venvs.main()'
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from template_tools import bake, choices
from template_tools.install import (
    cpu_torch_index,
    depends_on_torch,
    uv_environment,
    uv_install_command,
    venv_python,
)

TEMPLATE_DIR = Path(__file__).resolve().parents[2]
VENVS = TEMPLATE_DIR / ".cache" / "generated-venv"
EXTRAS = ("dev",)
# With the framework, the answers whose project depends on every package the others do.
SUPERSET = {"tracking": "wandb"}
READY = ".complete"  # written last: a venv without it was interrupted
INSTALL_TIMEOUT = 1800  # seconds: installing torch and friends takes minutes
PACKAGE = TEMPLATE_DIR / "cloudgpu"  # the machinery every project pins (template_tools/package.py)


def dependency_key(project: Path) -> str:
    """A hash of what the venv holds: the Python, the project's dependencies and the extras."""
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = meta.get("optional-dependencies", {})
    wanted = {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "dependencies": meta["dependencies"],
        "extras": {name: optional[name] for name in EXTRAS},
    }
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


def run_logged(
    command: list[str], cwd: Path, timeout: int, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `command`; its output, stdout and stderr merged, comes back in the result."""
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def create_venv(venv: Path, project: Path) -> None:
    """Make `venv` and install `project` into it, as a user does; fail with pip's output."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    index = cpu_torch_index() if depends_on_torch(project) else []
    target = f"{project}[{','.join(EXTRAS)}]"
    command = uv_install_command(venv_python(venv), [*index, "--editable", target])
    done = run_logged(command, project, INSTALL_TIMEOUT, env={**os.environ, **uv_environment()})
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-6000:]}"
    (venv / READY).write_text(" ".join(command) + "\n", encoding="utf-8")


def shared_venv(framework: str, superset: Path) -> Path:
    """The Python of `framework`'s shared venv, made (from its SUPERSET project) or reused.

    Test runs in the same checkout (several terminals) take turns through a lock file.
    """
    venv = VENVS / f"{framework}-{dependency_key(superset)}"
    VENVS.mkdir(parents=True, exist_ok=True)
    with (VENVS / f".{framework}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / READY).exists():
            # A venv is a gigabyte or more: keep only the current one of each framework.
            for stale in VENVS.glob(f"{framework}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            create_venv(venv, superset)
        install_package(venv_python(venv))
    return venv_python(venv)


@functools.cache
def package_wheel() -> Path:
    """The cloudgpu wheel of this checkout, built once per process: what the projects' tests
    run is the artifact a release would publish (its data files included), of this source."""
    out = Path(tempfile.mkdtemp(prefix="cloudgpu-wheel-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    command = [sys.executable, "-m", "uv", "build", "--wheel", "--out-dir", str(out), str(PACKAGE)]
    done = run_logged(command, TEMPLATE_DIR, 300, {**os.environ, **uv_environment()})
    assert done.returncode == 0, f"building the cloudgpu wheel failed:\n{done.stdout[-4000:]}"
    [wheel] = out.glob("cloudgpu-*.whl")
    return wheel


def install_package(python: Path) -> None:
    """Put this checkout's cloudgpu wheel into the venv of `python`, over what it had (a venv is
    reused across sessions; the package's source changes within one)."""
    command = uv_install_command(python, ["--no-deps", "--reinstall", str(package_wheel())])
    done = run_logged(command, TEMPLATE_DIR, 300, {**os.environ, **uv_environment()})
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-4000:]}"


def make_venvs(supersets: dict[str, Path]) -> dict[str, Path]:
    """framework -> the Python of its shared venv, every framework's made at once (two pip
    installs side by side take little longer than one)."""
    with ThreadPoolExecutor(len(supersets)) as pool:
        made = {
            name: pool.submit(shared_venv, name, project) for name, project in supersets.items()
        }
    return {name: future.result() for name, future in made.items()}


def main() -> None:
    """Every framework's shared venv, made from a SUPERSET project baked for the purpose."""
    with tempfile.TemporaryDirectory() as scratch:
        supersets = {
            name: bake(TEMPLATE_DIR, Path(scratch) / name, {**SUPERSET, "framework": name})
            for name in choices()["framework"]
        }
        for name, python in make_venvs(supersets).items():
            print(f"{name}: {python}")
