"""The profile `invoke estimate` models a run from, taken on this machine: a few hundred steps of
the run timed (at one thread and at more, and at half the batch, each a short run of the real
trainer, whose closing summary has its train_steps_per_second), its gradients' size read from
its log, and one exchange of that many bytes between two endpoints of this machine timed. Kept
in .cache/estimate/, where `invoke train --dry-run` finds it again."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from invoke import Exit

from cloud import estimate as model
from cloud.catalog import Offer

from . import framework
from .project import PACKAGE

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ".cache/estimate"  # under the project, unless ESTIMATE_PROFILES names a folder
TIMED_STEPS = 200  # optimizer steps a profile run times, after an epoch of warm-up
LIMIT = 100  # batches a profile epoch takes at most
BUCKETS = ("s3://", "gs://", "gcs://", "az://", "abfs://")  # data.source in a bucket
DATA_LINE = re.compile(r"data \S+: (\d+) train / \d+ val / \d+ test, input \(([\d, ]*)\)")
MODEL_LINE = re.compile(r"model \S+: ([\d,]+) parameters")
RATE = re.compile(r"^\s+train_steps_per_second\s+([\d.]+)$", re.MULTILINE)  # the run's summary
# What a profile run sets itself; the same keys given after `--` are left out of it.
PROFILE_KEYS = (
    "hydra.run.dir", "trainer.device", "trainer.max_epochs", "trainer.limit_train_batches",
    "trainer.limit_eval_batches", "test", "logger", "monitoring", "callbacks.early_stopping",
    "data.batch_size",
)  # fmt: skip


# Runs `python -m PACKAGE.train ARGS` with ENV added: here, or in the image (cpu_scaling.py).
Runner = Callable[[list[str], dict[str, str]], "subprocess.CompletedProcess[str]"]


def host_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _key(text: str) -> str:
    return re.sub(r"^[+~]+", "", text.partition("=")[0])


def here(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`python -m PACKAGE.train ARGS` on this machine, `env` added to its environment, on as
    many of its CPUs as OMP_NUM_THREADS says: a thread a core, as the model has it (another
    Runner runs it elsewhere: benchmarks/cpu_scaling.py's, in the image)."""
    return subprocess.run(
        [sys.executable, "-m", f"{PACKAGE}.train", *args],
        capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT,
        preexec_fn=lambda: _pin(int(env.get("OMP_NUM_THREADS", 0))),
    )  # fmt: skip


def _pin(threads: int) -> None:
    """This process (a child about to start the trainer) on its first `threads` CPUs: a thread
    that moves between CPUs, or shares one with another, times slower and unevenly."""
    if threads and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])


def run_config(overrides: list[str], run: Runner = here) -> dict[str, Any]:
    """The whole run's config as Hydra composes it (nothing trains)."""
    import yaml  # the project's environment has it (Hydra's); `invoke --list` does not import it

    done = run([*overrides, "--cfg", "job", "--resolve"], {})
    if done.returncode != 0:
        raise Exit(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "error", 2)
    return yaml.safe_load(done.stdout)


def timed_run(
    overrides: list[str], threads: int, batch: int, epochs: int, run_dir: str, run: Runner = here
) -> tuple[float, str]:
    """Train `epochs` short epochs at `threads` threads and `batch`: the seconds an optimizer
    step takes (the run's train_steps_per_second), and its log."""
    kept = [o for o in overrides if _key(o) not in PROFILE_KEYS]
    settings = [
        f"hydra.run.dir={run_dir}", "trainer.device=cpu", f"trainer.max_epochs={epochs}",
        f"trainer.limit_train_batches={LIMIT}", "trainer.limit_eval_batches=1", "test=false",
        "logger=jsonl", "monitoring=none", "callbacks.early_stopping=null",
        f"data.batch_size={batch}",
    ]  # fmt: skip
    done = run([*kept, *settings], framework.thread_env(threads))
    log = done.stdout + done.stderr
    rate = RATE.search(log)
    if done.returncode != 0 or not rate or float(rate[1]) <= 0:
        last = log.strip().splitlines()[-1] if log.strip() else f"exit status {done.returncode}"
        raise Exit(f"error: the profile run ({threads} threads, batch {batch}) failed: {last}", 1)
    return 1.0 / float(rate[1]), log


def local_all_reduce_s(nbytes: int, rounds: int = 15) -> float:
    """The median time two endpoints on this machine take to swap `nbytes` both ways over TCP:
    a ring all-reduce of two nodes moves that much each way."""
    payload = bytes(max(1, nbytes))
    with socket.create_server(("127.0.0.1", 0)) as server:
        one = socket.create_connection(server.getsockname())
        other, _ = server.accept()
    times = []
    with one, other:
        for _ in range(rounds + 2):
            started = time.perf_counter()
            senders = [threading.Thread(target=s.sendall, args=(payload,)) for s in (one, other)]
            for sender in senders:
                sender.start()
            for end in (one, other):
                _receive(end, len(payload))
            for sender in senders:
                sender.join()
            times.append(time.perf_counter() - started)
    return statistics.median(times[2:])


def _receive(end: socket.socket, size: int) -> None:
    view = memoryview(bytearray(size))
    while size:
        got = end.recv_into(view[-size:], size)
        if not got:
            raise OSError("the all-reduce peer closed")
        size -= got


def profile(
    overrides: list[str],
    threads: list[int],
    run: Runner = here,
    run_root: str = "",
    repeats: int = 1,
) -> model.Profile:
    """Time the run at each of `threads` and at half its batch, one thread, the median of
    `repeats` runs each (`run` runs the trainer, its run folders under `run_root`: a temporary
    folder here by default)."""
    config = run_config(overrides, run)
    data, trainer = config["data"], config["trainer"]
    batch = int(data["batch_size"])
    if batch < 2:
        raise Exit("error: data.batch_size must be 2 or more to profile (half of it is timed)", 2)
    with tempfile.TemporaryDirectory() as scratch:
        root = run_root or scratch
        epochs = 3
        first, log = timed_run(overrides, 1, batch, epochs, f"{root}/calibrate", run)
        found, params = DATA_LINE.search(log), MODEL_LINE.search(log)
        if not found or not params:
            raise Exit("error: the profile run's log has no data or model line", 1)
        batches = min(LIMIT, math.ceil(int(found[1]) / batch))
        timed = max(epochs, 1 + math.ceil(TIMED_STEPS / batches))

        def median_step(count: int, size: int, name: str) -> float:
            times = [first] if (count, size) == (1, batch) and timed == epochs else []
            while len(times) < repeats:  # the first run counts where it timed enough steps
                step, _ = timed_run(
                    overrides, count, size, timed, f"{root}/{name}-{len(times)}", run
                )
                times.append(step)
            return statistics.median(times)

        step_s = {count: median_step(count, batch, f"threads-{count}") for count in threads}
        half = median_step(1, batch // 2, "half")
    shape = [int(n) for n in found[2].replace(" ", "").split(",") if n]
    source = str(data.get("source", ""))
    shards = data.get("shards") or {}
    parameters = int(params[1].replace(",", ""))
    return model.Profile(
        step_s=step_s,
        half_batch_step_s=half,
        batch=batch,
        batch_is_global=framework.BATCH_IS_GLOBAL,
        train_samples=int(found[1]),
        epochs=int(trainer["max_epochs"]),
        batches_limit=trainer.get("limit_train_batches"),
        accumulate=int(trainer.get("accumulate_grad_batches") or 1),
        parameters=parameters,
        sample_bytes=4 * math.prod(shape) + 8,  # float32 inputs and an int64 label
        from_bucket=source.startswith(BUCKETS),
        cache_gb=float(shards["cache_gb"]) if shards.get("cache_gb") else None,
        local_all_reduce_s=local_all_reduce_s(4 * parameters),
        host_cores=host_cores(),
    )


def saved_path(overrides: list[str]) -> Path:
    digest = hashlib.sha256(json.dumps(overrides).encode()).hexdigest()[:16]
    return Path(os.environ.get("ESTIMATE_PROFILES") or ROOT / PROFILES) / f"{digest}.json"


def save(found: model.Profile, overrides: list[str]) -> Path:
    path = saved_path(overrides)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"overrides": overrides, "taken": time.strftime("%Y-%m-%d %H:%M"),
              "profile": dataclasses.asdict(found)}  # fmt: skip
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def saved(overrides: list[str]) -> tuple[model.Profile, str] | None:
    """The profile `invoke estimate` kept for these overrides, and when it was taken."""
    path = saved_path(overrides)
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    return model.Profile.from_json(record["profile"]), record["taken"]


def plan_line(offer: Offer | None, nodes: int, spot: bool, overrides: list[str]) -> str:
    """What `invoke train --cloud=...` shows of the run's time and cost on its CPU machine:
    the estimate from the profile kept for these overrides, or how to take one."""
    if offer is None or not offer.is_cpu:
        return ""
    kept = saved(overrides)
    if kept is None:
        given = f" -- {shlex.join(overrides)}" if overrides else ""
        return (
            f"none yet: invoke estimate --cloud {offer.cloud} --machine {offer.machine} "
            f"--nodes {nodes}{' --spot' if spot else ''}{given} (about a minute here)"
        )
    found, taken = kept
    done = model.estimate(found, model.candidate(offer, nodes, spot))
    return (
        f"about {model.duration(done.seconds)}, ${model.dollars(done.cost)} for {done.steps:,} "
        f"steps of {done.step_s * 1000:.1f} ms (invoke estimate's model; profiled {taken})"
    )
