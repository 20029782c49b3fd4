"""The profile `invoke estimate` models a run from, taken on this machine: a few hundred steps of
the run timed (at one thread and at more, and at half the batch, each a short run of the real
trainer, whose closing summary has its train_steps_per_second), its gradients' size read from
its log, and one exchange of that many bytes between two endpoints of this machine timed. Kept
in .cache/estimate/, where `invoke train --dry-run` finds it again."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from invoke import Exit

from cloudgpu import estimate as model
from cloudgpu.catalog import Offer
from cloudgpu.project import ROOT

from . import loopback
from .project import PACKAGE, framework

PROFILES = ".cache/estimate"  # under the project, unless ESTIMATE_PROFILES names a folder
TIMED_STEPS = 200  # optimizer steps a profile run times, after an epoch of warm-up
LIMIT = 100  # batches a profile epoch takes at most
BUCKETS = ("s3://", "gs://", "gcs://", "az://", "abfs://")  # data.source in a bucket
DATA_LINE = re.compile(r"data \S+: (\d+) train / \d+ val / \d+ test, input \(([\d, ]*)\)")
MODEL_LINE = re.compile(r"model \S+: ([\d,]+) parameters")
RATE = re.compile(r"^\s+train_steps_per_second\s+([\d.]+)$", re.MULTILINE)  # the run's summary
PREFLIGHT = (  # the check `python -m PACKAGE.train` makes of its command line first
    f"import sys; from {PACKAGE}.config import preflight, schema; schema.register(); "
    "preflight.check('train', sys.argv[1:])"
)
# What a profile run sets itself; the same keys given after `--` are left out of it.
PROFILE_KEYS = (
    "hydra.run.dir", "trainer.device", "trainer.max_epochs", "trainer.limit_train_batches",
    "trainer.limit_eval_batches", "test", "logger", "monitoring", "callbacks.early_stopping",
    "data.batch_size",
)  # fmt: skip


# Runs `python -m PACKAGE.train ARGS` once for each environment given (added to the process's),
# side by side, process i on CPUs of its own: here, or in the image (cpu_scaling.py).
Runner = Callable[[list[str], list[dict[str, str]]], "list[subprocess.CompletedProcess[str]]"]


def host_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _key(text: str) -> str:
    return re.sub(r"^[+~]+", "", text.partition("=")[0])


def here(args: list[str], envs: list[dict[str, str]]) -> list[subprocess.CompletedProcess[str]]:
    """The trainer on this machine, a process per environment, each on as many CPUs of its own
    as its OMP_NUM_THREADS says: a thread a core, as the model has it."""
    command = [sys.executable, "-m", f"{PACKAGE}.train", *args]
    started = [
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env},
            preexec_fn=functools.partial(_pin, index, _threads(env)),
        )
        for index, env in enumerate(envs)
    ]
    return finished(started)


def finished(started: list[subprocess.Popen[str]]) -> list[subprocess.CompletedProcess[str]]:
    """Each process's exit status and output, once it ends (its pipes read as it goes)."""
    done = []
    for process in started:
        out, err = process.communicate()
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, err))
    return done


def _threads(env: dict[str, str]) -> int:
    return int(env.get("OMP_NUM_THREADS", "0"))


def _pin(index: int, threads: int) -> None:
    """This process (a child about to start the trainer) on CPUs of its own: a thread that moves
    between CPUs, or shares one with another, times slower and unevenly."""
    if threads and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))[index * threads : (index + 1) * threads]
        os.sched_setaffinity(0, cpus or sorted(os.sched_getaffinity(0)))


def run_config(overrides: list[str], run: Runner = here) -> dict[str, Any]:
    """The whole run's config as Hydra composes it (nothing trains)."""
    import yaml  # the project's environment has it (Hydra's); `invoke --list` does not import it

    (done,) = run([*overrides, "--cfg", "job", "--resolve"], [{}])
    if done.returncode != 0:
        raise Exit(_bad_command_line(overrides, done.stderr), 2)
    return yaml.safe_load(done.stdout)


def _bad_command_line(overrides: list[str], said: str) -> str:
    """The trainer's own line for overrides it refuses (Hydra's --cfg skips its check of the
    command line), else Hydra's first."""
    checked = subprocess.run(
        [sys.executable, "-c", PREFLIGHT, *overrides], capture_output=True, text=True, cwd=ROOT
    )
    lines = checked.stderr.strip().splitlines()
    if lines and lines[-1].startswith("error: "):
        return lines[-1]
    first = said.strip().splitlines()[:1] or ["the run's config does not compose"]
    return f"error: {first[0]}"


def timed_run(
    overrides: list[str], threads: int, batch: int, epochs: int, run_dir: str, run: Runner = here,
    processes: int = 1, limit: int = LIMIT,
) -> tuple[float, str]:  # fmt: skip
    """Train `epochs` short epochs (of `limit` batches at most) at `threads` threads and `batch`
    (in `processes` data-parallel processes of this machine): the seconds an optimizer step takes
    (the run's train_steps_per_second, the first process's), and the first process's log."""
    kept = [o for o in overrides if _key(o) not in PROFILE_KEYS]
    settings = [
        f"hydra.run.dir={run_dir}", "trainer.device=cpu", f"trainer.max_epochs={epochs}",
        f"trainer.limit_train_batches={limit}", "trainer.limit_eval_batches=1", "test=false",
        "logger=jsonl", "monitoring=none", "callbacks.early_stopping=null",
        f"data.batch_size={batch}",
    ]  # fmt: skip
    ports = (loopback.free_port(), loopback.free_port())
    envs = [
        framework.thread_env(threads) | (framework.pair_env(rank, ports) if processes > 1 else {})
        for rank in range(processes)
    ]
    done = run([*kept, *settings], envs)
    log = done[0].stdout + done[0].stderr
    rate = RATE.search(log)
    failed = [d for d in done if d.returncode != 0]
    if failed or not rate or float(rate[1]) <= 0:
        said = (failed[0].stdout + failed[0].stderr) if failed else log
        last = said.strip().splitlines()[-1] if said.strip() else "no output"
        what = f"{processes} x " if processes > 1 else ""
        setting = f"{what}{threads} threads, batch {batch}"
        raise Exit(f"error: the profile run ({setting}) failed: {last}", 1)
    return 1.0 / float(rate[1]), log


def profile(
    overrides: list[str],
    threads: list[int],
    run: Runner = here,
    run_root: str = "",
    repeats: int = 1,
    config: dict[str, Any] | None = None,
    limit: int = LIMIT,
    timed_steps: int = TIMED_STEPS,
) -> model.Profile:
    """Time the run at each of `threads`, at half its batch on one thread, and as two
    data-parallel processes of a thread each, the median of `repeats` runs each (`run` runs the
    trainer, its run folders under `run_root`: a temporary folder here by default; `config`:
    run_config's, where it was read already; `limit` batches an epoch and `timed_steps` after
    the first: fewer for a quick look, as the tests take one)."""
    config = config or run_config(overrides, run)
    data, trainer = config["data"], config["trainer"]
    batch = int(data["batch_size"])
    if batch < 2:
        raise Exit("error: data.batch_size must be 2 or more to profile (half of it is timed)", 2)
    with tempfile.TemporaryDirectory() as scratch:
        root = run_root or scratch
        epochs = 3
        first, log = timed_run(overrides, 1, batch, epochs, f"{root}/calibrate", run, 1, limit)
        found, params = DATA_LINE.search(log), MODEL_LINE.search(log)
        if not found or not params:
            raise Exit("error: the profile run's log has no data or model line", 1)
        batches = min(limit, math.ceil(int(found[1]) / batch))
        timed = max(epochs, 1 + math.ceil(timed_steps / batches))

        def median_step(count: int, size: int, name: str, processes: int = 1) -> float:
            reuse = (count, size, processes) == (1, batch, 1) and timed == epochs
            times = [first] if reuse else []  # the first run timed enough steps already
            while len(times) < repeats:
                folder = f"{root}/{name}-{len(times)}"
                step, _ = timed_run(overrides, count, size, timed, folder, run, processes, limit)
                times.append(step)
            return statistics.median(times)

        step_s = {count: median_step(count, batch, f"threads-{count}") for count in threads}
        half = median_step(1, batch // 2, "half")
        # Two processes of a thread each, data parallel: what a step's coordination costs.
        pair = median_step(1, batch, "pair", processes=2) if host_cores() >= 2 else None
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
        local_all_reduce_s=loopback.swap_seconds(4 * parameters),
        host_cores=host_cores(),
        pair_step_s=pair,
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
            f"--nodes {nodes}{' --spot' if spot else ''}{given} (a minute or two here)"
        )
    found, taken = kept
    done = model.estimate(found, model.candidate(offer, nodes, spot))
    return (
        f"about {model.duration(done.seconds)}, ${model.dollars(done.cost)} for {done.steps:,} "
        f"steps of {done.step_s * 1000:.1f} ms (invoke estimate's model; profiled {taken})"
    )
