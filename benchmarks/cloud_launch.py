"""From `invoke train --cloud=local` to the first training step, split into its stages, beside
a plain `invoke run --cpu` of the same image on the same engine (the baseline: no registry, no
pull, no startup script), on a warm cache.

    python benchmarks/cloud_launch.py [--rounds 3]

Stages: build (`invoke build --cpu`, every layer cached), push (`invoke push --cloud=local` to a
local registry), pull (the image by digest, after removing it from the engine), start (the
startup script's own work until the container runs: registry, outputs, secrets), first step
(the container's start until the trainer logs its first step). On a cloud VM the same stages
run, plus the VM's boot and its driver; this measures what the template adds around them.

It needs a Docker engine with a BuildKit client and Debian's docker-registry; the image builds
on the tests' stand-in base (tests/helpers/engine.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from docker_bench import TEMPLATE_DIR, bake, build_command, engine, engine_and_base, torch_wheels

TRAIN = ["logger=jsonl", "debug=fast", "trainer.log_every_n_steps=1"]


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Run a command; exit with its output if it fails; its seconds and its stdout."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return time.perf_counter() - started, done.stdout


def first_step(folder: Path, started: float, process: subprocess.Popen) -> float:
    """Seconds from `started` until a metrics.jsonl under `folder` has a line."""
    while time.perf_counter() - started < 600:
        for log in folder.rglob("metrics.jsonl"):
            if log.read_text().strip():
                return time.perf_counter() - started
        if process.poll() not in (None, 0):
            sys.exit(f"the run failed:\n{process.communicate()[0][-3000:]}")
        time.sleep(0.05)
    sys.exit("no training step within 10 minutes")


def launch_round(project: Path, env: dict[str, str], reference: str, runs: Path) -> dict:
    """Pull by digest (the image removed first), then `invoke train --cloud=local` until the
    container runs (start) and until its first step: the seconds of each."""
    docker = env["DOCKER"]
    engine.run(docker, "image", "rm", "--force", reference)
    pull, _ = timed([docker, "pull", "--quiet", reference], project, env)
    command = [
        sys.executable,
        "-m",
        "invoke",
        "train",
        "--cloud=local",
        f"--image={reference}",
        "--",
        *TRAIN,
    ]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    marks: dict[str, float] = {}
    while "first step" not in marks:
        names = engine.run(docker, "ps", "--format", "{{.Names}}").stdout
        if "start" not in marks and "train-" in names:
            marks["start"] = time.perf_counter() - started
        if any(log.read_text().strip() for log in runs.rglob("metrics.jsonl")):
            marks["first step"] = time.perf_counter() - started - marks.get("start", 0.0)
        if process.poll() not in (None, 0):
            sys.exit(f"the run failed:\n{process.communicate()[0][-3000:]}")
        time.sleep(0.05)
    process.communicate(timeout=300)
    return {"pull": pull, **marks}


def plain_run(project: Path, env: dict[str, str], reference: str, outputs: Path) -> float:
    """The baseline: `invoke run --cpu` of the same image, until its first step."""
    outputs.mkdir(exist_ok=True)
    for log in outputs.rglob("metrics.jsonl"):
        log.unlink()
    if os.getuid() == 0:
        os.chown(outputs, 1000, 1000)  # the image's user writes there
    command = [
        sys.executable,
        "-m",
        "invoke",
        "run",
        "--cpu",
        f"--image={reference}",
        f"--outputs={outputs}",
        "--",
        *TRAIN,
    ]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seconds = first_step(outputs, started, process)
    process.communicate(timeout=300)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    client, base = engine_and_base()
    with (
        tempfile.TemporaryDirectory() as scratch,
        engine.local_registry(Path(scratch)) as registry,
        torch_wheels(client) as links,
    ):
        project = bake(
            TEMPLATE_DIR,
            Path(scratch) / "p",
            {"project_name": "Bench Launch", "python_version": "3.11"},
        )
        subprocess.run(["git", "init", "-q"], cwd=project, check=True)
        settings = Path(scratch) / "cloud.toml"
        settings.write_text(f'[local]\nregistry = "{registry}"\nbucket = "{scratch}/bucket"\n')
        runs = Path(scratch) / "runs"
        env = {
            **os.environ,
            "DOCKER": client,
            "CLOUD_SETTINGS": str(settings),
            "CLOUD_RUNS": str(runs),
            "POLL_SECONDS": "0.2",
        }
        build = build_command(base, links)
        timed(build, project, env | {"DOCKER_BUILDKIT": "1"})  # cold: fills the cache
        rows: dict[str, list[float]] = {}
        for _ in range(rounds):
            rows.setdefault("build (warm)", []).append(
                timed(build, project, env | {"DOCKER_BUILDKIT": "1"})[0]
            )
            seconds, output = timed(
                [sys.executable, "-m", "invoke", "push", "--cloud=local"], project, env
            )
            rows.setdefault("push", []).append(seconds)
            reference = output.split("digest ")[-1].strip()
            for stage, value in launch_round(project, env, reference, runs).items():
                rows.setdefault(stage, []).append(value)
            rows.setdefault("baseline: invoke run to first step", []).append(
                plain_run(project, env, reference, Path(scratch) / "plain")
            )
    width = max(map(len, rows))
    print(f"{'stage':<{width}}  median s   min s   max s   ({rounds} rounds, warm cache)")
    for stage, values in rows.items():
        print(
            f"{stage:<{width}}  {statistics.median(values):8.2f} {min(values):7.2f} "
            f"{max(values):7.2f}"
        )
    launch = sum(statistics.median(rows[stage]) for stage in ("start", "first step"))
    baseline = statistics.median(rows["baseline: invoke run to first step"])
    print(f"\n--cloud=local, start to first step: {launch:.2f} s; invoke run: {baseline:.2f} s")
    print(json.dumps({k: statistics.median(v) for k, v in rows.items()}))


if __name__ == "__main__":
    main()
