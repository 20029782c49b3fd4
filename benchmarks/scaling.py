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

from docker_bench import TEMPLATE_DIR, bake, build_command, engine_and_base, torch_wheels


def main(project_script: str = "scaling.py") -> None:
    """Bake, build, then run the project's benchmarks/<project_script> on the image."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["pytorch", "tensorflow"], default="pytorch")
    args, rest = parser.parse_known_args()
    client, base = engine_and_base()
    with (
        tempfile.TemporaryDirectory() as scratch,
        torch_wheels(client) as links,
    ):
        answers = {"project_name": "Bench Scaling", "python_version": "3.11"}
        project = bake(TEMPLATE_DIR, Path(scratch) / "p", answers | {"framework": args.framework})
        env = {**os.environ, "DOCKER": client, "DOCKER_BUILDKIT": "1"}
        git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
        for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "bench"]):
            subprocess.run([*git, *step], cwd=project, check=True)
        build = build_command(base, links)
        done = subprocess.run(build, cwd=project, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"invoke build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        revision = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=project, capture_output=True, text=True
        ).stdout.strip()
        image = f"{project.name}:{revision}-cpu"  # the tag `invoke build --cpu` gives it
        script = project / "benchmarks" / project_script
        rest = [word for word in rest if word != "--"]
        command = [sys.executable, str(script), "--image", image, *rest]
        code = subprocess.run(command, env=env).returncode
        subprocess.run([client, "image", "rm", "--force", image], capture_output=True)
        sys.exit(code)


if __name__ == "__main__":
    main()
