"""Running the project here: install it, train, evaluate, export, cross-validate, sweep."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from invoke import Context, Exit, task

from cloudgpu.project import ROOT

from .args import override_args, overrides, whole_number
from .project import DEFAULT_CLOUD, DEFAULT_GPU, PACKAGE, framework

PYTHON = shlex.quote(sys.executable)


def _module(module: str, c: Context, extra: str = "") -> str:
    return f"{PYTHON} -m {PACKAGE}.{module} {extra} {overrides(c)}".strip()


def _pty() -> bool:
    return sys.stdout.isatty()


@task(
    help={
        "cpu": f"install the CPU build of {framework.NAME}",
        "no_cpu": f"install the CUDA build of {framework.NAME}",
    }
)
def setup(c: Context, cpu: bool = False, no_cpu: bool = False) -> None:
    """Install the project and its dev tools here; the CPU build unless an NVIDIA GPU is found."""
    if cpu and no_cpu:
        raise Exit("error: --cpu and --no-cpu contradict each other: give one, or neither", code=2)
    if not cpu and not no_cpu:
        cpu = shutil.which("nvidia-smi") is None
        print(f"{'no' if cpu else 'an'} NVIDIA GPU here: the {'CPU' if cpu else 'CUDA'} build")
    c.run(framework.setup_command(PYTHON, cpu), pty=False)


@task(
    optional=["cloud"],
    help={
        "gpus": framework.GPUS_HELP,
        "cloud": f"train on a cloud VM: aws, gcp, azure, or local (this machine's Docker engine, "
        f"the same launch path); --cloud alone is {DEFAULT_CLOUD}; any with --backend=skypilot "
        "(SkyPilot picks among the clouds it has enabled)",
        "gpu": f"with --cloud: NAME[:COUNT] from `invoke gpus` (default {DEFAULT_GPU})",
        "cpus": "with --cloud: a CPU machine instead, the cheapest with at least N vCPUs "
        "(invoke machines); the trainer's threads are its physical cores",
        "memory": "with --cloud: a CPU machine with at least this many GiB of memory",
        "machine": "with --cloud: this machine type (invoke machines), CPU or GPU",
        "spot": "with --cloud: a spot VM (cheaper, may be preempted: the run checkpoints and "
        "--retries relaunches it)",
        "region": "with --cloud: the region (default: cloud.toml, else the CLI's own setting)",
        "zone": "with --cloud: the zone (default: cloud.toml, else the CLI's, else any)",
        "image": "with --cloud: the image to run, by digest (default: build and push this one)",
        "max_hours": "with --cloud: the machine deletes itself after this many hours",
        "dry_run": "with --cloud: print every command and the startup script; start nothing",
        "detach": "with --cloud: return once the VM is started (invoke status, logs, stop)",
        "yes": "with --cloud: start without asking (the price is still shown)",
        "resume": "with --cloud: continue that run (its id) from the checkpoint in its bucket",
        "retries": "with --cloud: relaunch a preempted run up to this many times",
        "backend": "with --cloud: vm (one VM, the default), managed (the cloud's training "
        "service: SageMaker, Vertex AI, Azure ML) or skypilot (a SkyPilot managed job)",
        "nodes": "with --backend=managed or skypilot: machines, each with --gpu's GPUs",
        "monitor": "with --cloud: the VM serves live metrics (the trainer's, node_exporter's, "
        "dcgm-exporter's) for invoke monitor --run ID",
    },
)
def train(
    c: Context,
    gpus: str = "1",
    cloud: str = "",
    gpu: str = "",
    spot: bool = False,
    region: str = "",
    zone: str = "",
    image: str = "",
    max_hours: str = "4",
    dry_run: bool = False,
    detach: bool = False,
    yes: bool = False,
    resume: str = "",
    retries: str = "0",
    backend: str = "vm",
    nodes: str = "1",
    monitor: bool = False,
    cpus: str = "",
    memory: str = "",
    machine: str = "",
) -> None:
    """Train here, or on a cloud machine with --cloud: invoke train [--cloud=gcp] -- OVERRIDES.

    Here, --gpus N trains on N of this machine's GPUs; --cloud=aws|gcp|azure|local|any --gpu=t4
    (or --cpus 32, or --machine TYPE) runs on a cloud VM (or a training service: --backend).
    Hydra overrides go after `--`."""
    cloud_only = {
        "gpu": gpu,
        "spot": spot,
        "region": region,
        "zone": zone,
        "image": image,
        "dry-run": dry_run,
        "detach": detach,
        "yes": yes,
        "resume": resume,
        "backend": backend != "vm",
        "nodes": nodes != "1",
        "monitor": monitor,
        "cpus": cpus,
        "memory": memory,
        "machine": machine,
    }
    given = sorted(flag for flag, value in cloud_only.items() if value)
    if not cloud:
        if given:
            flags = ", ".join(f"--{flag}" for flag in given)
            raise Exit(f"error: {flags}: only with --cloud (here, --gpus N picks the GPUs)", code=2)
        count = whole_number("--gpus", gpus, 1)
        command, env = framework.train_command(PYTHON, PACKAGE, count, overrides(c))
        c.run(command, env=env, pty=_pty())
        return
    if gpus != "1":
        raise Exit(
            "error: --gpus is for this machine; with --cloud, --gpu NAME:COUNT (invoke gpus)", 2
        )
    from .remote_run import run_in_cloud

    run_in_cloud(
        c,
        DEFAULT_CLOUD if cloud is True else str(cloud),
        gpu,
        spot,
        region,
        zone,
        image,
        max_hours,
        dry_run,
        detach,
        yes,
        resume,
        whole_number("--retries", retries, 0),
        override_args(c),
        backend,
        nodes,
        monitor,
        cpus=cpus,
        memory=memory,
        machine=machine,
    )


@task(help={"ckpt": "a checkpoint file, or a run directory (its best checkpoint)"})
def evaluate(c: Context, ckpt: str = "") -> None:
    """Score a checkpoint on the held-out split: invoke evaluate --ckpt RUN_DIR."""
    if not ckpt:
        raise Exit("error: invoke evaluate needs --ckpt RUN_DIR (or a checkpoint file)", code=2)
    if not Path(ckpt).exists():
        raise Exit(f"error: --ckpt {ckpt}: no such file or run directory", code=2)
    c.run(_module("evaluate", c, f"ckpt_path={shlex.quote(ckpt)}"), pty=_pty())


@task(
    help={
        "run": "a run folder (its best checkpoint), a checkpoint file, or a cloud run's id",
        "format": f"the model's format: {', '.join(framework.EXPORT_FORMATS)} (the default)",
    }
)
def export(c: Context, run: str = "", format: str = "") -> None:
    """Export a trained run as a model folder, RUN/model/, checked against the trained model."""
    if not run:
        raise Exit("error: invoke export needs --run RUN_DIR (or a checkpoint file)", code=2)
    from .remote import run_here  # the cloud's modules only for a cloud run's id

    run = run_here(run)
    chosen = format or framework.EXPORT_FORMATS[0]
    if chosen not in framework.EXPORT_FORMATS:
        choices = ", ".join(framework.EXPORT_FORMATS)
        raise Exit(f"error: --format {chosen!r}: this project exports {choices}", code=2)
    done = c.run(
        f"{PYTHON} -m {PACKAGE}.export {shlex.quote(run)} --format {chosen}", warn=True, pty=_pty()
    )
    if done is None or done.exited:
        raise Exit(code=done.exited if done is not None else 1)


@task(help={"folds": "number of folds, at least 2"})
def crossval(c: Context, folds: str = "5") -> None:
    """K-fold cross-validation over train+val: invoke crossval --folds 5."""
    count = whole_number("--folds", folds, 2)
    c.run(_module("crossval", c, f"data.folds={count}"), pty=_pty())


@task(help={"search": "a config in configs/hparams_search/ (Optuna); omit for a grid"})
def sweep(c: Context, search: str = "") -> None:
    """Hyperparameter sweep: invoke sweep -- optimizer.lr=1e-3,3e-3 (grid), or --search NAME."""
    if search:
        known = sorted(p.stem for p in (ROOT / "configs" / "hparams_search").glob("*.yaml"))
        if search not in known:
            raise Exit(f"error: --search {search}: choose one of {', '.join(known)}", code=2)
    chosen = f"hparams_search={search}" if search else "--multirun"
    c.run(_module("train", c, chosen), pty=_pty())
