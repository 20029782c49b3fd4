"""The template's image tasks, `invoke images.<task>`: base images and the locks of the images.

Each base image is a row of images/matrix.json: images/Dockerfile built on the row's
digest-pinned CUDA base with the row's hash lock (images/<framework>/<row id>.txt). The generated
projects' locks are made here too, one pair per framework and tracking choice, and the template
carries them in {{cookiecutter.project_slug}}/_locks/ (prune.json moves the chosen pair).

Standard library and invoke only at import time, like tasks.py.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from invoke import Context, Exit, task

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "images"
PROJECT_LOCKS = ROOT / "{{cookiecutter.project_slug}}" / "_locks"
DOCKER = os.environ.get("DOCKER", "docker")  # another client: DOCKER=/usr/bin/docker, podman
BUILD = ROOT / "build" / "images"  # the assembled Dockerfile
NAMESPACE = "cloud-gpu-template"  # local image names: cloud-gpu-template/pytorch:<tag>
# The projects' locks are made for the first Python choice; see the README.
LOCK_PYTHON = "3.11"
LOCK_PLATFORM = "x86_64-manylinux_2_28"


def _rows(row_id: str) -> list[dict[str, Any]]:
    from template_tools.images import matrix, row

    try:
        return [row(row_id)] if row_id else matrix()
    except KeyError as error:
        raise Exit(str(error.args[0]), code=2) from None


def image_tag(row: dict[str, Any], python: str) -> str:
    """The local name of a row's base image: cloud-gpu-template/pytorch:2.13.0-cu130-py3.11."""
    cuda = row["cuda"].replace(".", "")
    return f"{NAMESPACE}/{row['framework']}:{row['version']}-cu{cuda}-py{python}"


def python_base_tag(row: dict[str, Any], python: str) -> str:
    """The local name of a row's Python base (NVIDIA's base and a Python, what projects build on):
    cloud-gpu-template/python:13.0.3-base-ubuntu24.04-py3.11."""
    return f"{NAMESPACE}/python:{row['base_image'].split(':', 1)[1]}-py{python}"


def dockerfile() -> Path:
    """images/Dockerfile with the Python stage in place, written under build/images/."""
    from template_tools.images import with_python_stage

    assembled = BUILD / "Dockerfile"
    assembled.parent.mkdir(parents=True, exist_ok=True)
    assembled.write_text(with_python_stage((IMAGES / "Dockerfile").read_text()), encoding="utf-8")
    return assembled


def build_command(
    row: dict[str, Any], python: str, base_image: str = "", target: str = ""
) -> list[str]:
    """The `docker build` of a row's framework image, or of its Python base (`target` python);
    `base_image` replaces the row's CUDA base (a stand-in)."""
    from template_tools.images import base_reference

    args = {
        "BASE_IMAGE": base_image or base_reference(row),
        "PYTHON": f"python{python}",
        "LOCK": f"{row['framework']}/{row['id']}.txt",
        "FRAMEWORK": row["framework"],
        "CUDA": row["cuda"],
    }
    tag = python_base_tag(row, python) if target == "python" else image_tag(row, python)
    return [
        *(DOCKER, "build", *(f"--build-arg={key}={value}" for key, value in args.items())),
        *([f"--target={target}"] if target else []),
        *(f"--file={dockerfile()}", f"--tag={tag}", str(IMAGES)),
    ]


def _run(c: Context, command: list[str], what: str, dry_run: bool, **kwargs: Any) -> None:
    if dry_run:
        print(shlex.join(command))
        return
    if c.run(shlex.join(command), warn=True, **kwargs).failed:
        raise Exit(f"{what} failed; the output above says why", code=1)


@task(
    help={
        "row": "the matrix row to build, e.g. torch-2.13.0-cu130 (default: every row)",
        "python": "the Python version of the image",
        "base_image": "build on this image instead of the row's CUDA base (a local stand-in)",
        "dry_run": "print the docker commands instead of running them",
    }
)
def build(
    c: Context,
    row: str = "",
    python: str = LOCK_PYTHON,
    base_image: str = "",
    dry_run: bool = False,
) -> None:
    """Build the base images of the matrix, each row's Python base and framework image:
    invoke images.build [--row ID]."""
    for chosen in _rows(row):
        for target in ("python", ""):
            command = build_command(chosen, python, base_image, target)
            _run(c, command, "docker build", dry_run, env={"DOCKER_BUILDKIT": "1"})


@task(
    help={
        "registry": "where to push, e.g. ghcr.io/you (the image keeps its framework:tag name)",
        "row": "the matrix row to push (default: every row)",
        "python": "the Python version of the image",
        "dry_run": "print the docker commands instead of running them",
    }
)
def push(
    c: Context, registry: str, row: str = "", python: str = LOCK_PYTHON, dry_run: bool = False
) -> None:
    """Push built base images to a registry and print their digests: images.push --registry REF.

    A Python base's digest goes into its row's `python_base` in images/matrix.json (by hand, in
    a reviewed change): projects baked after that build on it.
    """
    for chosen in _rows(row):
        for local in (python_base_tag(chosen, python), image_tag(chosen, python)):
            remote = f"{registry.rstrip('/')}/{local.removeprefix(NAMESPACE + '/')}"
            _run(c, [DOCKER, "tag", local, remote], "docker tag", dry_run)
            _run(c, [DOCKER, "push", remote], "docker push", dry_run)
            if dry_run:
                continue
            inspected = c.run(shlex.join([DOCKER, "image", "inspect", remote]), hide=True)
            repository = remote.rsplit(":", 1)[0]
            digests = json.loads(inspected.stdout)[0]["RepoDigests"]
            print(f"pushed {next(d for d in digests if d.startswith(repository + '@'))}")


@task
def refresh(c: Context) -> None:
    """Re-read the matrix rows from the package index and Docker Hub (online; not run in CI)."""
    from template_tools.matrix_refresh import refresh as refresh_matrix

    report = refresh_matrix()
    print("\n".join(report) if report else "images/matrix.json: every fact re-read, none changed")
    print("then: invoke images.lock, and review `git diff images/`")


def _uv_env() -> dict[str, str]:
    from template_tools.install import uv_environment

    return uv_environment()


def _lock_base_image(c: Context, row: dict[str, Any], scratch: Path) -> None:
    """images/<framework>/<row id>.txt: the row's framework, held to its CUDA wheels."""
    requirement = "tensorflow[and-cuda]" if row["framework"] == "tensorflow" else row["package"]
    inputs, constraints = scratch / f"{row['id']}.in", scratch / f"{row['id']}-cuda.txt"
    inputs.write_text(f"{requirement}=={row['version']}\n", encoding="utf-8")
    constraints.write_text("\n".join(row["cuda_wheels"]) + "\n", encoding="utf-8")
    output = IMAGES / row["framework"] / f"{row['id']}.txt"
    command = [
        *(sys.executable, "-m", "uv", "pip", "compile", "--quiet", "--generate-hashes"),
        *("--no-annotate", "--python-version", LOCK_PYTHON, "--python-platform", LOCK_PLATFORM),
        *("--custom-compile-command", "invoke images.lock"),
        *(str(inputs), "--constraint", str(constraints), "--output-file", str(output)),
    ]
    c.run(shlex.join(command), env=_uv_env())
    print(f"locked {output.relative_to(ROOT)}")


def _lock_project(c: Context, answers: dict[str, str], scratch: Path, find_links: str) -> None:
    """The generated project's own `invoke lock`, copied into _locks/<framework>-<tracking>/."""
    from template_tools import bake

    project = bake(ROOT, scratch, {**answers, "python_version": LOCK_PYTHON})
    links = ["--find-links", find_links] if find_links else []
    with c.cd(str(project)):
        c.run(shlex.join([sys.executable, "-m", "invoke", "lock", *links]), env=_uv_env())
    target = PROJECT_LOCKS / f"{answers['framework']}-{answers['tracking']}" / "requirements"
    target.mkdir(parents=True, exist_ok=True)
    # The training image's locks and the serving image's: `invoke lock` makes all four.
    for lock in ("gpu", "cpu", "serve-gpu", "serve-cpu"):
        shutil.copyfile(project / "requirements" / f"{lock}.txt", target / f"{lock}.txt")
    print(f"locked {target.relative_to(ROOT)}/{{gpu,cpu,serve-gpu,serve-cpu}}.txt")


@task(
    help={
        "find_links": "a folder or URL with the CPU build of torch, read instead of PyTorch's CPU "
        "index (offline, or behind a mirror)",
    }
)
def lock(c: Context, find_links: str = "") -> None:
    """Regenerate every image lock: base images (images/) and generated projects (_locks/)."""
    from template_tools import choices
    from template_tools.images import matrix

    options = choices()
    with tempfile.TemporaryDirectory() as scratch:
        for row in matrix():
            _lock_base_image(c, row, Path(scratch))
        for framework in options["framework"]:
            for tracking in options["tracking"]:
                answers = {"framework": framework, "tracking": tracking}
                _lock_project(c, answers, Path(scratch) / f"{framework}-{tracking}", find_links)
