"""CPU scaling measured beside `invoke estimate`'s prediction: the compute-bound model (the CNN
on the digits, wider) at 1 and 2 threads in one container, and at 1 and 2 nodes (containers on a
network of their own, as scaling.py runs them, this machine's cores shared between them); the
prediction for each from the profile `invoke estimate` takes (cloudgpu.tasks), taken in the
same image, and its model (cloudgpu/estimate.py). Each container's run reports the threads its
trainer ran on, checked against those it was given.

    invoke build --cpu && python benchmarks/cpu_scaling.py --image {{ cookiecutter.project_slug }}:<tag>-cpu

Targets: 2 threads at least 1.7x one thread, and every prediction within 25% of its measurement.
Steps a second are the trainer's own (metrics.json's train_steps_per_second: the training steps
after the first epoch, validation and checkpoints left out), for the measurement and the profile.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from subprocess import PIPE

import scaling  # beside this file: the containers-as-nodes runner

ROOT = Path(__file__).resolve().parents[1]
os.environ["CLOUDGPU_PROJECT"] = str(ROOT)  # the tasks' view of this project, wherever run from
from cloudgpu import estimate as model  # noqa: E402
from cloudgpu.tasks import profiling  # noqa: E402
from cloudgpu.tasks.project import framework  # noqa: E402

MODEL = ["model=cnn", "model.channels=[64,128]"]  # the CNN, wider
{%- set tf = cookiecutter.framework == "tensorflow" %}
# A batch whose steps are large enough for two threads to share: at 64 a step is many small
# operations, and 2 threads made {{ "1.21x" if tf else "1.12x" }} one thread's steps a second here; at 256,
# {{ "1.72x" if tf else "1.65x" }} (2026-12-05, a 2-core machine, the defaults; one round: {{ "1.68x" if tf else "1.89x" }}).
BATCH = 256
RATE = re.compile(r"train_steps_per_second\s+([\d.]+)")
THREADS = re.compile(r"^\s+threads\s+(\d+)$", re.MULTILINE)
SPEED_UP_TARGET, ERROR_TARGET = 1.7, 0.25


def model_overrides(args: argparse.Namespace) -> list[str]:
    """The run both the measurement and the profile take: the model, its batch, its epochs."""
    return [f"trainer.max_epochs={args.epochs}", *MODEL, f"data.batch_size={args.batch}"]


def measured(
    args: argparse.Namespace, nodes: int, threads: int, scratch: Path
) -> tuple[float, int]:
    """Steps a second of `nodes` containers of `threads` threads each, and the threads the
    first node's trainer reports."""
    overrides = [
        f"hydra.run.dir={scaling.RUN}", "trainer.device=cpu", "trainer.limit_eval_batches=1",
        "test=false", "logger=jsonl", "monitoring=none", "callbacks.early_stopping=null",
        *model_overrides(args),
        *([f"trainer.limit_train_batches={args.steps}"] if args.steps else []),
    ]  # fmt: skip
    pinned = [f"{name}={value}" for name, value in framework.thread_env(threads).items()]
    command = ["env", *pinned, "python", "-m", f"{scaling.PACKAGE}.launch", *overrides]
    # Each node on CPUs of its own, as a machine has them; a thread a CPU.
    cpusets = [f"{i * threads}-{(i + 1) * threads - 1}" for i in range(nodes)]
    (log, *_) = scaling.nodes_run(args, nodes, command, scratch, cpusets=cpusets)
    rate, seen = RATE.search(log), THREADS.search(log)
    if not rate or not seen:
        sys.exit(f"the run printed no train_steps_per_second or threads:\n{log[-3000:]}")
    return float(rate[1]), int(seen[1])


def profiled(args: argparse.Namespace) -> model.Profile:
    """invoke estimate's profile of the run, its trainer started in the image."""

    def in_image(
        train: list[str], envs: list[dict[str, str]]
    ) -> list[subprocess.CompletedProcess[str]]:
        started = []
        for index, env in enumerate(envs):  # side by side, on CPUs of their own
            threads = int(env.get("OMP_NUM_THREADS", "0")) or profiling.host_cores()
            cpus = f"{index * threads}-{(index + 1) * threads - 1}"
            command = [
                os.environ.get("DOCKER", "docker"), "run", "--rm", "--network=host",
                "--shm-size=2g", f"--cpuset-cpus={cpus}",
                *(f"--env={name}={value}" for name, value in env.items()),
                "--entrypoint=dumb-init", args.image, "--",
                "python", "-m", f"{scaling.PACKAGE}.train", *train,
            ]  # fmt: skip
            started.append(subprocess.Popen(command, stdout=PIPE, stderr=PIPE, text=True))
        return profiling.finished(started)

    quick = {"limit": args.steps, "timed_steps": 2 * args.steps} if args.steps else {}
    return profiling.profile(
        model_overrides(args), [1, 2], in_image, "/tmp/profile", args.repeats, **quick
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the project's CPU image")
    parser.add_argument("--epochs", type=int, default=11, help="1 of warm-up, the rest timed")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each case (median)")
    parser.add_argument("--repeats", type=int, default=3, help="of each profile run (median)")
    parser.add_argument("--batch", type=int, default=BATCH, help="data.batch_size of every run")
    parser.add_argument(
        "--steps", type=int, default=0,
        help="batches an epoch, at most, in every run (the profile's too): a quick look, "
        "too few steps to time well (default: whole epochs, and the profile's own)",
    )  # fmt: skip
    args = parser.parse_args()
    args.gpus = 0  # scaling.nodes_run's: CPU containers
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        found = profiled(args)
        if found.host_cores < 2:
            sys.exit("this machine has one core: nothing to scale over")
        cases = {"1 thread": (1, 1), "2 threads": (1, 2), "2 nodes": (2, 1)}  # 1 node: 2 threads
        rates: dict[str, list[float]] = {}
        seen: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, (nodes, threads) in cases.items():
                rate, seen[name] = measured(args, nodes, threads, scratch)
                rates.setdefault(name, []).append(rate)
    predicted = {
        "1 thread": 1 / model.compute_s(found, 1, found.batch),
        "2 threads": 1 / model.compute_s(found, 2, found.batch),
        "2 nodes": model.estimate(found, model.local(found.host_cores, 2)).steps_per_second,
    }
    print(f"{'case':<10} {'threads':>7} {'seen':>5} {'measured':>9} {'predicted':>9} {'error':>7}")
    figures: dict[str, dict[str, float]] = {}
    for name, (nodes, threads) in cases.items():
        rate = statistics.median(rates[name])
        error = predicted[name] / rate - 1
        figures[name] = {"measured": rate, "predicted": predicted[name], "error": error,
                         "threads_given": threads, "threads_seen": seen[name]}  # fmt: skip
        print(f"{name:<10} {f'{nodes}x{threads}':>7} {seen[name]:>5} {rate:9.1f} "
              f"{predicted[name]:9.1f} {error:+7.1%}")  # fmt: skip
    speed_up = figures["2 threads"]["measured"] / figures["1 thread"]["measured"]
    worst = max(abs(f["error"]) for f in figures.values())
    speed_met = "met" if speed_up >= SPEED_UP_TARGET else "MISSED"
    error_met = "met" if worst <= ERROR_TARGET else "MISSED"
    print(
        f"2 threads over 1: {speed_up:.2f}x (target {SPEED_UP_TARGET}x: {speed_met}); worst "
        f"prediction error {worst:.0%} (target {ERROR_TARGET:.0%}: {error_met})"
    )
    print(json.dumps({"cases": figures, "speed_up": speed_up, "worst_error": worst}))


if __name__ == "__main__":
    main()
