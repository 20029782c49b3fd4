"""Image builds: the generated project's Dockerfile against the single-stage one people write.

For each Dockerfile, in one run: a cold build (`--no-cache`), then a rebuild after a one-line
change to the training code. Printed side by side: both times, the rebuild as a share of the
cold build, how many layers the rebuild made anew, and the image size.

The naive Dockerfile copies the whole project and pip-installs it, with no lock and no stages;
it gets the same base image and the same source of the CPU build of torch as ours.

    python benchmarks/image_rebuild.py

It needs a Docker engine and a client that builds with BuildKit (DOCKER=... to choose one). NVIDIA's
bases cannot be pulled everywhere, so both build on the tests' stand-in base (Debian bookworm
with Python 3.11, made once with debootstrap; see tests/engine.py). Our cold build still reads
pip's download cache (a BuildKit cache mount) when an earlier build filled it: that is how it
runs on a developer's machine; the naive build has no such cache.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from docker_bench import TEMPLATE_DIR, bake, build_command, engine, engine_and_base, torch_wheels

NAIVE_DOCKERFILE = """\
FROM {base}
ARG PIP_FIND_LINKS=""
ARG PIP_TRUSTED_HOST=""
ARG PIP_EXTRA_INDEX_URL=""
WORKDIR /app
COPY . .
RUN python3 -m venv /venv && /venv/bin/pip install .
ENV PYTHONPATH=/app/src
ENTRYPOINT ["/venv/bin/python", "-m", "{package}.train"]
"""


def timed(command: list[str], cwd: Path, client: str) -> float:
    """Run a build with BuildKit; exit with its output if it fails; return its seconds."""
    env = {**os.environ, "DOCKER": client, "DOCKER_BUILDKIT": "1"}
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
    return time.perf_counter() - started


def image_size(client: str, image: str) -> int:
    done = engine.run(client, "image", "inspect", image)
    return json.loads(done.stdout)[0]["Size"]


def one_line_change(project: Path) -> None:
    train = next((project / "src").glob("*/train.py"))
    train.write_text(train.read_text() + "# a one-line change\n")


def measure(client: str, name: str, project: Path, build: list[str], image: str) -> dict:
    """Cold build, one-line change, rebuild: times, new layers and size of `image`."""
    cold = timed([*build, "--no-cache"], project, client)
    before = engine.layer_digests(client, image)
    size = image_size(client, image)
    cold_id = engine.run(client, "image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    one_line_change(project)
    rebuild = timed(build, project, client)
    after = engine.layer_digests(client, image)
    new_layers = sum(1 for a, b in zip(before, after, strict=False) if a != b)
    engine.run(client, "image", "rm", cold_id)  # untagged by the rebuild
    return {"name": name, "cold": cold, "rebuild": rebuild, "new": new_layers,
            "layers": len(after), "size": size}  # fmt: skip


def report(rows: list[dict]) -> None:
    print()
    print(f"{'Dockerfile':<28}{'cold build':>12}{'rebuild':>10}{'rebuild/cold':>14}"
          f"{'layers rebuilt':>16}{'image size':>12}")  # fmt: skip
    for row in rows:
        print(
            f"{row['name']:<28}{row['cold']:>10.1f} s{row['rebuild']:>8.1f} s"
            f"{row['rebuild'] / row['cold']:>14.1%}{row['new']:>9} of {row['layers']:<4}"
            f"{row['size'] / 1e6:>10.0f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    client, base = engine_and_base()
    # A base of this run's own: fresh build-cache keys, so the cold builds start from nothing.
    run_base = f"{base.split(':')[0]}:bench-{uuid.uuid4().hex[:8]}"
    # (A layer of its own: BuildKit keys a local base's cache by its layers, not its labels.)
    own = f"FROM {base}\nRUN echo {run_base} > /etc/benchmark-run\n"
    engine.run(client, "build", "--quiet", "--tag", run_base, "-", input=own)
    with (
        tempfile.TemporaryDirectory() as scratch,
        torch_wheels(client) as links,
    ):
        answers = {"project_name": "Bench Project", "python_version": "3.11"}
        ours = bake(TEMPLATE_DIR, Path(scratch) / "ours", answers)
        naive = Path(scratch) / "naive" / ours.name
        shutil.copytree(ours, naive, ignore=shutil.ignore_patterns(".dockerignore"))
        package = next(p.name for p in (ours / "src").iterdir() if p.is_dir())
        (naive / "Dockerfile").write_text(NAIVE_DOCKERFILE.format(base=run_base, package=package))
        ours_build = build_command(run_base, links)
        host = links.split("/")[2] if links else ""
        source = (
            [f"--build-arg=PIP_FIND_LINKS={links}", f"--build-arg=PIP_TRUSTED_HOST={host}"]
            if links
            else ["--build-arg=PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu"]
        )
        naive_build = [client, "build", *source, "--tag", "bench-naive:cpu", "."]
        rows = [
            measure(client, "ours (multi-stage, locked)", ours, ours_build, "bench-project:cpu"),
            measure(client, "naive (single stage)", naive, naive_build, "bench-naive:cpu"),
        ]
    report(rows)
    for image in ("bench-project", "bench-naive"):
        listed = engine.run(client, "image", "ls", "--quiet", f"--filter=reference={image}")
        engine.run(client, "image", "rm", "--force", *set(listed.stdout.split()))
    engine.run(client, "image", "rm", run_base)


if __name__ == "__main__":
    main()
