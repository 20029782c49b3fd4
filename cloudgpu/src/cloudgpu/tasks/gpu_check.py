"""invoke gpu-check: benchmarks/gpu_check.py on this machine's NVIDIA GPU, inside the GPU image
(as a cloud run trains) or in this environment; one report, text and JSON."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from invoke import Context, Exit, task

from cloudgpu.project import ROOT

from . import image as images
from .run import _pty

CHECK = "benchmarks/gpu_check.py"
# The runtime image holds no test tools: pytest, pytest-xdist and invoke (some test modules
# import the tasks) are installed for the check, beside the image's own packages, into a folder
# that goes with the container.
IN_IMAGE = (
    "python -m pip install --quiet --no-warn-script-location --target /tmp/check-tools"
    " 'pytest>=8' 'pytest-xdist>=3.6' 'invoke>=2.2'"
    f" && PYTHONPATH=/tmp/check-tools exec python {CHECK} --out /out"
)


@task(
    name="gpu-check",
    auto_shortflags=False,  # -h stays --help's (invoke would give it to --here)
    help={
        "here": "run in this environment (`invoke setup` on the GPU machine), not in the image",
        "image": "the GPU image to check (default: this revision's, as `invoke train --cloud` "
        "pushes it, built if it is missing)",
        "out": "the report's folder (default: gpu-check)",
        "dry_run": "print the commands instead of running them (no GPU needed)",
    },
)
def gpu_check(
    c: Context, here: bool = False, image: str = "", out: str = "gpu-check", dry_run: bool = False
) -> None:
    """Check what only a GPU shows: its tests, the benchmark, SIGTERM-and-resume; one report."""
    if shutil.which("nvidia-smi") is None and not dry_run:
        raise Exit(
            "error: no NVIDIA GPU here (nvidia-smi not found): invoke gpu-check needs one; "
            f"`python {CHECK} --device cpu` rehearses it on the CPU",
            code=2,
        )
    folder = Path(out).resolve()
    if here:
        command = [sys.executable, CHECK, "--out", str(folder)]
    else:
        reference = image or images.tag(c, "gpu")  # the image a cloud run trains in
        command = _docker_command(reference, folder)
    if dry_run:
        if not here and not image:
            print(f"$ invoke build   # unless {reference} is built")
        print(f"$ {shlex.join(command)}")
        return
    folder.mkdir(parents=True, exist_ok=True)
    if not here:
        images._docker_engine(c)
        if not image and not images.exists(c, reference):
            print(f"no {reference} yet: building it (invoke build)")
            images.build(c)
    done = c.run(shlex.join(command), warn=True, pty=_pty())
    if done is not None and done.failed:
        raise Exit(code=done.exited)


def _docker_command(reference: str, folder: Path) -> list[str]:
    """The check in a container of `reference`: every GPU, the project read-only at /check (its
    tests and benchmarks; the image has src/ only), the report written to `folder` as you."""
    command = [images.DOCKER, "run", "--rm", "--gpus=all", "--shm-size=8g"]
    if hasattr(os, "getuid"):
        command += [f"--user={os.getuid()}:{os.getgid()}", "--env=HOME=/tmp"]
    return [
        *command,
        f"--volume={ROOT}:/check:ro",
        f"--volume={folder}:/out",
        "--workdir=/check",
        "--entrypoint=bash",
        reference,
        "-c",
        IN_IMAGE,
    ]
