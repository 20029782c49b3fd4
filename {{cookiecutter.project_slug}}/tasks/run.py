"""Running the project here: install it, train, evaluate, cross-validate, sweep."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

from invoke import Context, Exit, task

from . import framework
from .args import overrides, whole_number
from .project import PACKAGE

PYTHON = shlex.quote(sys.executable)
ROOT = Path(__file__).resolve().parents[1]  # the project


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
        raise Exit("--cpu and --no-cpu contradict each other: give one, or neither", code=2)
    if not cpu and not no_cpu:
        cpu = shutil.which("nvidia-smi") is None
        print(f"{'no' if cpu else 'an'} NVIDIA GPU here: the {'CPU' if cpu else 'CUDA'} build")
    c.run(framework.setup_command(PYTHON, cpu), pty=False)


@task(help={"gpus": framework.GPUS_HELP})
def train(c: Context, gpus: str = "1") -> None:
    """Train locally: invoke train [--gpus N] [-- hydra overrides]."""
    count = whole_number("--gpus", gpus, 1)
    command, env = framework.train_command(PYTHON, PACKAGE, count, overrides(c))
    c.run(command, env=env, pty=_pty())


@task(help={"ckpt": "a checkpoint file, or a run directory (its best checkpoint)"})
def evaluate(c: Context, ckpt: str = "") -> None:
    """Score a checkpoint on the held-out split: invoke evaluate --ckpt RUN_DIR."""
    if not ckpt:
        raise Exit("invoke evaluate needs --ckpt RUN_DIR (or a checkpoint file)", code=2)
    if not Path(ckpt).exists():
        raise Exit(f"--ckpt {ckpt}: no such file or run directory", code=2)
    c.run(_module("evaluate", c, f"ckpt_path={shlex.quote(ckpt)}"), pty=_pty())


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
            raise Exit(f"--search {search}: choose one of {', '.join(known)}", code=2)
    chosen = f"hparams_search={search}" if search else "--multirun"
    c.run(_module("train", c, chosen), pty=_pty())
