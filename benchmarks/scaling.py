"""Scaling over nodes, as a project runs it: bake a project, build its CPU image on the tests'
stand-in base, and run the project's own benchmarks/scaling.py (1 and 2 containers as the
nodes of one SageMaker-style job, at the same global batch, beside the ideal).

    python benchmarks/scaling.py [--framework pytorch|tensorflow] [-- project script arguments]

It needs a Docker engine with a BuildKit client (tests/helpers/engine.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TEMPLATE_DIR))
sys.path.insert(0, str(TEMPLATE_DIR / "tests"))  # the Docker helpers the tests use

from helpers import engine  # noqa: E402

from template_tools import bake  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["pytorch", "tensorflow"], default="pytorch")
    args, rest = parser.parse_known_args()
    client = engine.docker_client()
    if client is None:
        sys.exit("no Docker engine answers a client that builds with BuildKit")
    base = engine.build_stand_in(client)
    with (
        tempfile.TemporaryDirectory() as scratch,
        engine.torch_find_links(client) as links,
    ):
        if links is None:
            sys.exit(f"{engine.CPU_TORCH_INDEX_HOST} is unreachable and no local torch+cpu wheel")
        answers = {"project_name": "Bench Scaling", "python_version": "3.11"}
        project = bake(TEMPLATE_DIR, Path(scratch) / "p", answers | {"framework": args.framework})
        env = {**os.environ, "DOCKER": client, "DOCKER_BUILDKIT": "1"}
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"]):
            subprocess.run([*git, *step], cwd=project, check=True)
        build = [
            sys.executable, "-m", "invoke", "build", "--cpu", "--base-image", base,
            "--python", engine.STAND_IN_PYTHON, *(["--find-links", links] if links else []),
        ]  # fmt: skip
        done = subprocess.run(build, cwd=project, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"invoke build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        revision = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=project, capture_output=True, text=True
        ).stdout.strip()
        image = f"{project.name}:{revision}-cpu"  # the tag `invoke build --cpu` gives it
        script = project / "benchmarks" / "scaling.py"
        rest = [word for word in rest if word != "--"]
        command = [sys.executable, str(script), "--image", image, *rest]
        code = subprocess.run(command, env=env).returncode
        subprocess.run([client, "image", "rm", "--force", image], capture_output=True)
        sys.exit(code)


if __name__ == "__main__":
    main()
