"""Project tasks: `invoke --list`, `invoke <task> --help`.

Hydra overrides go after `--`: `invoke train -- model=cnn trainer.max_epochs=5`.
Tasks import only the standard library, so `invoke --list` stays instant; the heavy imports
happen in the processes they start.
"""

from __future__ import annotations

import shlex
import shutil
import sys

from invoke import Context, Exit, task

PACKAGE = "{{ cookiecutter.package_name }}"
PYTHON = shlex.quote(sys.executable)
{%- if cookiecutter.framework == "pytorch" %}
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
{%- endif %}


def _overrides(c: Context) -> str:
    """Hydra overrides given after `--`."""
    return c.remainder.strip()


def _module(module: str, c: Context, extra: str = "") -> str:
    return f"{PYTHON} -m {PACKAGE}.{module} {extra} {_overrides(c)}".strip()


{% if cookiecutter.framework == "tensorflow" -%}
@task(help={"cpu": "install the CPU build of TensorFlow (default: only when no NVIDIA GPU)"})
def setup(c: Context, cpu: bool | None = None) -> None:
    """Install the project and its dev tools into this Python environment."""
    if cpu is None:
        cpu = shutil.which("nvidia-smi") is None
    extras = "dev" if cpu else "gpu,tools"  # dev is the CPU build and the tools
    c.run(f"{PYTHON} -m pip install -e '.[{extras}]'", pty=False)


@task(
    help={
        "gpus": "GPUs for MirroredStrategy in this one process (without a GPU: logical CPU "
        "devices); 1 trains on one device",
    }
)
def train(c: Context, gpus: int = 1) -> None:
    """Train locally: invoke train [--gpus N] [-- hydra overrides]."""
    if gpus < 1:
        raise Exit(f"--gpus must be at least 1, got {gpus}", code=2)
    env = {"NUM_REPLICAS": str(gpus)} if gpus > 1 else {}
    c.run(_module("train", c), env=env, pty=sys.stdout.isatty())
{%- else -%}
@task(help={"cpu": "install the CPU build of PyTorch (default: only when no NVIDIA GPU)"})
def setup(c: Context, cpu: bool | None = None) -> None:
    """Install the project and its dev tools into this Python environment."""
    if cpu is None:
        cpu = shutil.which("nvidia-smi") is None
    index = f"--extra-index-url {CPU_TORCH_INDEX}" if cpu else ""
    c.run(f"{PYTHON} -m pip install {index} -e '.[dev]'", pty=False)


@task(
    help={
        "gpus": "GPUs (or CPU processes) for DDP through torchrun; 1 runs a single process",
    }
)
def train(c: Context, gpus: int = 1) -> None:
    """Train locally: invoke train [--gpus N] [-- hydra overrides]."""
    if gpus < 1:
        raise Exit(f"--gpus must be at least 1, got {gpus}", code=2)
    if gpus == 1:
        c.run(_module("train", c), pty=sys.stdout.isatty())
        return
    c.run(
        f"{PYTHON} -m torch.distributed.run --standalone --nproc-per-node={gpus} "
        f"-m {PACKAGE}.train {_overrides(c)}",
        pty=sys.stdout.isatty(),
    )
{%- endif %}


@task(help={"ckpt": "a checkpoint file or a run directory (uses its best checkpoint)"})
def evaluate(c: Context, ckpt: str) -> None:
    """Score a checkpoint on the held-out split: invoke evaluate --ckpt RUN_DIR."""
    c.run(_module("evaluate", c, f"ckpt_path={shlex.quote(ckpt)}"), pty=sys.stdout.isatty())


@task(help={"folds": "number of folds"})
def crossval(c: Context, folds: int = 5) -> None:
    """K-fold cross-validation over train+val: invoke crossval --folds 5."""
    c.run(_module("crossval", c, f"data.folds={folds}"), pty=sys.stdout.isatty())


@task(help={"search": "a config in configs/hparams_search/ (Optuna); omit for a grid"})
def sweep(c: Context, search: str = "") -> None:
    """Hyperparameter sweep: invoke sweep -- optimizer.lr=1e-3,3e-3 (grid), or --search NAME."""
    chosen = f"hparams_search={search}" if search else "--multirun"
    c.run(_module("train", c, chosen), pty=sys.stdout.isatty())


@task
def test(c: Context) -> None:
    """Run the test suite on the CPU."""
    c.run(f"{PYTHON} -m pytest {_overrides(c)}", pty=sys.stdout.isatty())


@task
def lint(c: Context) -> None:
    """Check style and common bugs with ruff."""
    c.run(f"{PYTHON} -m ruff check .")
    c.run(f"{PYTHON} -m ruff format --check .")


@task(name="format")
def format_(c: Context) -> None:
    """Rewrite the code in ruff's style and apply safe fixes."""
    c.run(f"{PYTHON} -m ruff check --fix .")
    c.run(f"{PYTHON} -m ruff format .")
