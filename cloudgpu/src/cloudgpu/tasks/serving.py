"""Serving an exported model on this machine: invoke serve, here or in the serving image.

`invoke serve --model DIR` runs the server in this Python; `invoke serve --run RUN` runs the
serving image (`invoke build --serve --cpu`, built where missing) on the Docker engine with the
run's model mounted where SageMaker puts it: what an endpoint runs, on loopback. Either way the
server announces itself to `invoke monitor` (monitoring/grafana's serving dashboard shows it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

from invoke import Context, Exit, task

from cloudgpu.project import ROOT

from .args import port as port_number
from .image import DOCKER, build, exists, tag
from .project import PACKAGE
from .run import export

PYTHON = shlex.quote(sys.executable)
TARGETS = "outputs/monitor/targets"  # invoke monitor's default folder's


def model_folder(c: Context, run: str, dry_run: bool = False) -> Path:
    """RUN/model/, exported first where the run has none (in a dry run: said, not done)."""
    if not run:
        raise Exit("error: give --run RUN_DIR (a trained run's folder, or a cloud run's id)", 2)
    from .remote import run_here  # the cloud's modules only for a cloud run's id

    folder = Path(run_here(run, dry_run))
    if not folder.is_dir() and not dry_run:
        raise Exit(f"error: --run {run}: not a run folder", 2)
    model = folder / "model"
    if (model / "model.json").is_file():
        return model
    if dry_run:
        print(f"$ invoke export --run {run}   # the run has no model/ yet")
        return model
    export(c, run=str(folder))  # where the run has no checkpoint: one line, exit non-zero
    return model


@task(
    help={
        "model": "a model folder: invoke export --run RUN writes RUN/model/ (served here)",
        "run": "a trained run's folder instead: its model in the serving image, on Docker",
        "port": "where to listen (8080, as SageMaker's containers do)",
        "announce": "where `invoke monitor` finds it (default outputs/monitor/targets; '' for "
        "nowhere)",
    }
)
def serve(
    c: Context, model: str = "", run: str = "", port: str = "8080", announce: str = TARGETS
) -> None:
    """Serve an exported model: SageMaker, Vertex AI, Azure ML and KServe V2 routes."""
    number = port_number("--port", port)
    if model and run:
        raise Exit("error: --model and --run: give one (--run serves in the image)", 2)
    if not model and not run:
        raise Exit("error: invoke serve needs --model DIR or --run RUN (invoke export writes "
                   "RUN/model/)", 2)  # fmt: skip
    if model and not (Path(model) / "model.json").is_file():
        raise Exit(f"error: --model {model}: no model.json there (invoke export --run RUN)", 2)
    folder = model_folder(c, run).resolve() if run else Path(model)
    with _announced(announce, number, folder.resolve().parent.name):
        _serve(c, folder, bool(run), number)


@contextlib.contextmanager
def _announced(folder: str, port: int, name: str) -> Iterator[None]:
    """A file_sd target file while the server runs: the Prometheus of `invoke monitor`
    scrapes its /metrics (as it does a training run's), and the serving dashboard shows it."""
    if not folder:
        yield
        return
    target = ROOT / folder / f"serve-{port}-{os.getpid()}.json"  # ROOT / an absolute path: it
    target.parent.mkdir(parents=True, exist_ok=True)
    entry = [{"targets": [f"127.0.0.1:{port}"], "labels": {"served": name}}]
    target.write_text(json.dumps(entry), encoding="utf-8")
    try:
        yield
    finally:
        target.unlink(missing_ok=True)


def _serve(c: Context, folder: Path, in_image: bool, number: int) -> None:
    if in_image:
        image = tag(c, "serve-cpu")
        if not exists(c, image):
            print(f"no image {image} yet: building it")
            build(c, cpu=True, serve=True)
        mount = f"{folder}:/opt/ml/model:ro"
        print(f"serving {folder} in {image} on http://127.0.0.1:{number}")
        command = [DOCKER, "run", "--rm", "--publish", f"127.0.0.1:{number}:8080",
                   "--volume", mount, image, "serve"]  # fmt: skip
        c.run(shlex.join(command), pty=sys.stdout.isatty())
        return
    # This machine's loopback only, as announced: an endpoint's container listens on every
    # address (cloudgpu.serving.cli's default); the image's --publish above keeps to loopback.
    c.run(f"{PYTHON} -m {PACKAGE}.serve --model {shlex.quote(str(folder))} --host 127.0.0.1 "
          f"--port {number}", pty=sys.stdout.isatty())  # fmt: skip
