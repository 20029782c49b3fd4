"""Serving an exported model on this machine: invoke serve, here or in the serving image.

`invoke serve --model DIR` runs the server in this Python; `invoke serve --run RUN` runs the
serving image (`invoke build --serve --cpu`, built where missing) on the Docker engine with the
run's model mounted where SageMaker puts it: what an endpoint runs, on loopback.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from invoke import Context, Exit, task

from .args import port as port_number
from .image import DOCKER, build, exists, tag
from .project import PACKAGE
from .run import export

PYTHON = shlex.quote(sys.executable)


def model_folder(c: Context, run: str, dry_run: bool = False) -> Path:
    """RUN/model/, exported first where the run has none (in a dry run: said, not done)."""
    if not run:
        raise Exit("error: give --run RUN_DIR (a trained run's folder)", 2)
    folder = Path(run)
    if not folder.is_dir():
        raise Exit(f"error: --run {run}: no such run folder", 2)
    model = folder / "model"
    if (model / "model.json").is_file():
        return model
    if dry_run:
        print(f"$ invoke export --run {run}   # the run has no model/ yet")
        return model
    export(c, run=run)  # exits non-zero, saying why in one line, where the run has no checkpoint
    return model


@task(
    help={
        "model": "a model folder: invoke export --run RUN writes RUN/model/ (served here)",
        "run": "a trained run's folder instead: its model in the serving image, on Docker",
        "port": "where to listen (8080, as SageMaker's containers do)",
    }
)
def serve(c: Context, model: str = "", run: str = "", port: str = "8080") -> None:
    """Serve an exported model: SageMaker, Vertex AI, Azure ML and KServe V2 routes."""
    number = port_number("--port", port)
    if model and run:
        raise Exit("error: --model and --run: give one (--run serves in the image)", 2)
    if run:
        folder = model_folder(c, run).resolve()
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
    if not model:
        raise Exit("error: invoke serve needs --model DIR or --run RUN (invoke export writes "
                   "RUN/model/)", 2)  # fmt: skip
    if not (Path(model) / "model.json").is_file():
        raise Exit(f"error: --model {model}: no model.json there (invoke export --run RUN)", 2)
    c.run(f"{PYTHON} -m {PACKAGE}.serve --model {shlex.quote(model)} --port {number}",
          pty=sys.stdout.isatty())  # fmt: skip
