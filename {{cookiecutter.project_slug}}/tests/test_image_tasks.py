"""The image tasks, without an engine: the docker commands they make and their failures.

A stand-in `docker` (a shell script named by DOCKER) records its arguments and answers as told.
The images themselves are built and run by the template's tests on a real engine.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, project_env
from invoke import MockContext, Result

IMAGE = "{{ cookiecutter.project_slug }}"


@pytest.fixture
def fake_docker(tmp_path: Path) -> Path:
    """A `docker` that logs each call's arguments, one per line; `info` answers, the rest
    exit with $FAKE_DOCKER_EXIT (0 by default)."""
    script = tmp_path / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" >> "{tmp_path / "calls"}"\n'
        'echo "--" >> ' + f'"{tmp_path / "calls"}"\n'
        '[ "$1" = info ] && exit 0\n'
        'exit "${FAKE_DOCKER_EXIT:-0}"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def invoke(*args: str, docker: Path | str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=PROJECT_ROOT,
        env=project_env(DOCKER=str(docker), **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def calls(docker: Path) -> list[list[str]]:
    """Each call to the fake docker, as its list of arguments."""
    text = (docker.parent / "calls").read_text()
    return [call.strip("\n").split("\n") for call in text.split("--\n") if call.strip()]


@pytest.mark.parametrize("task", ["build", "run", "shell"])
def test_no_engine_is_a_clear_error(task: str, tmp_path: Path) -> None:
    done = invoke(task, docker="false")  # `false info` fails as a stopped engine does
    assert done.returncode == 1
    assert "no Docker engine answers" in done.stderr
    missing = invoke(task, docker=tmp_path / "no-such-docker")
    assert missing.returncode == 1
    assert "not found" in missing.stderr


def test_build_makes_the_gpu_image_tagged_with_the_revision(fake_docker: Path) -> None:
    done = invoke("build", docker=fake_docker)
    assert done.returncode == 0, done.stderr
    build = calls(fake_docker)[-1]
    assert build[0] == "build"
    assert "--build-arg=LOCK=requirements/gpu.txt" in build
    tags = [arg.removeprefix("--tag=") for arg in build if arg.startswith("--tag=")]
    assert tags[1] == f"{IMAGE}:gpu"
    assert tags[0].startswith(f"{IMAGE}:") and tags[0].endswith("-gpu")
    assert not [arg for arg in build if "BASE_IMAGE" in arg], "the Dockerfile's pinned base"
    assert not [arg for arg in build if arg.startswith("--target")], "the last stage: training's"


def test_build_cpu_with_another_base_and_python(fake_docker: Path) -> None:
    done = invoke("build", "--cpu", "--base-image", "debian:local", "--python", "python3",
                  docker=fake_docker)  # fmt: skip
    assert done.returncode == 0, done.stderr
    build = calls(fake_docker)[-1]
    assert "--build-arg=LOCK=requirements/cpu.txt" in build
    assert "--build-arg=BASE_IMAGE=debian:local" in build
    assert "--build-arg=PYTHON=python3" in build
    from cloudgpu.tasks.project import framework

    for name, value in framework.image_build_args(cpu=True, find_links="").items():
        assert f"--build-arg={name}={value}" in build


def test_build_serve_makes_the_serving_stage_from_the_serving_lock(fake_docker: Path) -> None:
    done = invoke("build", "--serve", "--cpu", docker=fake_docker)
    assert done.returncode == 0, done.stderr
    build = calls(fake_docker)[-1]
    assert "--build-arg=LOCK=requirements/serve-cpu.txt" in build
    assert build[-2:] == ["--target=serve", "."]
    tags = [arg.removeprefix("--tag=") for arg in build if arg.startswith("--tag=")]
    assert tags[1] == f"{IMAGE}:serve-cpu" and tags[0].endswith("-serve-cpu")
    assert (PROJECT_ROOT / "requirements/serve-cpu.txt").is_file()
    # The server is cloudgpu's: the release installed here, staged with its sums for the image.
    sums = (PROJECT_ROOT / "build/cloudgpu/SHA256SUMS").read_text().splitlines()
    assert any(line.endswith("  cloudgpu/serving/server.py") for line in sums)
    assert (PROJECT_ROOT / "build/cloudgpu/cloudgpu/serving/server.py").is_file()


def test_a_failed_build_says_so_and_exits_non_zero(fake_docker: Path) -> None:
    done = invoke("build", docker=fake_docker, FAKE_DOCKER_EXIT="3")
    assert done.returncode == 1
    assert "docker build failed (exit 3)" in done.stderr


def test_run_mounts_the_outputs_and_passes_overrides(fake_docker: Path, tmp_path: Path) -> None:
    outputs = tmp_path / "runs"
    done = invoke("run", "--cpu", "--outputs", str(outputs), "--", "trainer.max_epochs=2",
                  docker=fake_docker)  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = calls(fake_docker)[-1]
    assert run[0] == "run"
    assert f"--volume={outputs}:/workspace/outputs" in run
    assert "--gpus=all" not in run
    assert run[-2:] == [f"{IMAGE}:cpu", "trainer.max_epochs=2"]
    assert outputs.is_dir()


def test_push_needs_a_built_image(fake_docker: Path) -> None:
    done = invoke("push", "--registry", "localhost:5000", docker=fake_docker, FAKE_DOCKER_EXIT="1")
    assert done.returncode == 1
    assert "run `invoke build` first" in done.stderr


def test_the_source_label_leaves_credentials_out() -> None:
    from cloudgpu.tasks import image

    remote = "https://me:t0ken@example.com/team/project.git\n"
    context = MockContext(run={"git remote get-url origin": Result(remote)})
    assert image._source(context) == "https://example.com/team/project.git"
