"""The template's own tasks: `invoke --list`, `invoke <task> --help`.

Module-level imports are the standard library and invoke only, so `invoke --list` is instant;
cookiecutter and template_tools are imported inside the tasks that bake.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from invoke import Collection, Context, Exit, task

from images import tasks as image_tasks

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / "build"
PYTHON = shlex.quote(sys.executable)
# The template's own Python. The project template is Jinja: the tests lint baked projects instead.
TEMPLATE_PYTHON: tuple[str, ...] = ("template_tools", "hooks", "tests", "tasks.py", "benchmarks")
TEMPLATE_PYTHON += ("images", "cloudgpu")
WORKFLOWS = ROOT / ".github" / "workflows"
LOCK_INPUT = "requirements-dev.in"
LOCK_FILE = "requirements-dev.txt"
LOCK_PYTHON = "3.11"
ANSWER_SEPARATORS = re.compile(r"[\s,]+")
# `invoke bake` words that stand for answers: the defaults, or every variant the tests bake.
DEFAULTS = "defaults"
ALL_VARIANTS = "all"


def _pty() -> bool:
    return sys.stdout.isatty()


def _after_dashes(c: Context) -> str:
    """The arguments after `--`, quoted for c.run's shell, each as the shell handed it over:
    invoke joins them with spaces (c.remainder), so they are read whole from sys.argv."""
    given = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []
    return shlex.join(given if " ".join(given) == c.remainder else shlex.split(c.remainder))


def _tool(name: str) -> str:
    """The path of a tool installed from requirements-dev.txt (next to this Python first)."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        raise Exit(f"{name} not found: install the tools with pip install -r {LOCK_FILE}", code=2)
    return found


def _choose(text: str) -> dict[str, str]:
    """Answers from `key=value` pairs separated by spaces or commas; exit naming a bad one."""
    from template_tools import choices, default_answers

    known = [key for key in default_answers() if not key.startswith("_")]
    options = choices()
    answers = {}
    for pair in filter(None, ANSWER_SEPARATORS.split(text)):
        key, equals, value = pair.partition("=")
        if not equals:
            raise Exit(f"{pair!r} is not key=value; for example tracking=none", code=2)
        if key not in known:
            raise Exit(f"unknown option {key!r}; the options are: {', '.join(known)}", code=2)
        if key in options and value not in options[key]:
            raise Exit(
                f"{key}={value!r} is not a choice; choose one of: {', '.join(options[key])}",
                code=2,
            )
        answers[key] = value
    return answers


def _check(answers: Mapping[str, str]) -> dict[str, Any]:
    """The full answers for `answers` (defaults filled in); exit with the rule they break."""
    from template_tools import default_answers, validate

    full = default_answers(extra_context=answers)
    try:
        validate(full)
    except ValueError as error:
        raise Exit(f"error: {error}", code=2) from None
    return full


def _bake_fresh(output_dir: Path, answers: Mapping[str, str]) -> Path:
    """Bake `answers` into `output_dir`, replacing a project of the same name; return it."""
    from template_tools import bake as bake_project

    slug = _check(answers)["project_slug"]
    shutil.rmtree(output_dir / slug, ignore_errors=True)
    project = bake_project(ROOT, output_dir, answers)
    print(f"baked {_shown(project)}")
    return project


def _newest_metrics(project: Path, since: float) -> Path:
    """The metrics.json of the newest training run in `project` written after `since`."""
    runs = [
        path
        for path in (project / "outputs").glob("*/*/metrics.json")  # <task name>/<run>/
        if path.stat().st_mtime >= since
    ]
    if not runs:
        raise Exit(f"training wrote no outputs/*/*/metrics.json in {project}", code=1)
    return max(runs, key=lambda path: path.stat().st_mtime)


def _report_run(project: Path, metrics_path: Path) -> None:
    """What the run's own summary (just above) leaves out: the project, and what to type next."""
    json.loads(metrics_path.read_text(encoding="utf-8"))  # a whole metrics.json, or a traceback
    print(f"\nproject  {project}\nnext     cd {project} && .venv/bin/invoke --list")


# What a rebake of the demo carries over from the project it replaces: the runs, and the venv
# (an editable install of the same path, which pip then only brings up to date).
DEMO_KEEPS = ("outputs", ".venv")


def _bake_demo(output_dir: Path) -> Path:
    """Bake the default project into `output_dir`, keeping DEMO_KEEPS of an earlier demo there."""
    slug = _check({})["project_slug"]
    previous = output_dir / slug
    if not previous.exists():
        return _bake_fresh(output_dir, {})
    from template_tools import bake as bake_project

    staging = output_dir / ".rebake"
    shutil.rmtree(staging, ignore_errors=True)
    project = bake_project(ROOT, staging, {})
    kept = [name for name in DEMO_KEEPS if (previous / name).exists()]
    for name in kept:
        (previous / name).rename(project / name)
    shutil.rmtree(previous)
    project.rename(previous)
    staging.rmdir()
    runs = len(list((previous / "outputs").glob("*/*/"))) if "outputs" in kept else 0
    print(f"rebaked {_shown(previous)}, keeping {', '.join(kept)} ({runs} earlier runs)")
    return previous


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


@task(help={"output_dir": "the folder to bake the demo project into (default: build/demo)"})
def demo(c: Context, output_dir: str = "") -> None:
    """Bake the default project into build/demo/, install it in its own venv, train it on CPU.

    Hydra overrides for the training run go after `--`: invoke demo -- trainer.max_epochs=3.
    A rebake keeps the earlier demo's outputs/ (its runs) and its venv.
    """
    from template_tools.install import project_install_command, venv_python

    project = _bake_demo(Path(output_dir).resolve() if output_dir else BUILD / "demo")
    venv = project / ".venv"
    if not venv_python(venv).exists():
        c.run(shlex.join([sys.executable, "-m", "venv", str(venv)]))
    print(f"installing the project and its tools into {_shown(venv)} (minutes, the first time)")
    c.run(shlex.join([*project_install_command(venv_python(venv), project), "--quiet"]))
    started = time.time()
    train = [str(venv_python(venv)), "-m", "invoke", "train", "--"]
    with c.cd(project):
        c.run(f"{shlex.join(train)} {_after_dashes(c)}", pty=_pty())
    _report_run(project, _newest_metrics(project, started))


# invoke bench NAME: the script, and the answers of the project its loops train (None: it bakes
# its own and needs no framework installed here).
# Peers a benchmark runs beside the project, installed into its venv (pinned: figures compare).
PEERS = {"loop": ["pytorch-lightning==2.6.6"], "serving": ["litserve==0.2.19"]}
BENCHMARKS: dict[str, tuple[str, dict[str, str] | None]] = {
    "loop": ("train_loop_overhead.py", {}),
    "keras": ("keras_fit_overhead.py", {"framework": "tensorflow", "tracking": "none"}),
    "image": ("image_rebuild.py", None),
    "launch": ("cloud_launch.py", None),
    "streaming": ("streaming.py", {}),
    "monitoring": ("monitoring_overhead.py", {}),
    "monitoring-keras": ("monitoring_overhead.py", {"framework": "tensorflow", "tracking": "none"}),
    "scaling": ("scaling.py", None),
    "cpu-scaling": ("cpu_scaling.py", None),
    "serving": ("serving.py", {}),
    "readers": ("shard_readers.py", {}),
}


@task(
    help={
        "name": "loop (PyTorch Trainer vs a bare loop), keras (Keras fit vs a bare GradientTape "
        "loop), image (our Dockerfile vs a naive one), launch (invoke train --cloud=local to "
        "the first step, by stage, vs invoke run; image and launch need a Docker engine), "
        "streaming (shards vs in-memory arrays: peak memory and throughput) or monitoring, "
        "monitoring-keras (the live metrics' cost per step), scaling (1 and 2 nodes as containers: "
        "steps per second beside the ideal, the all-reduce time; needs a Docker engine), "
        "cpu-scaling (1 and 2 threads and nodes beside invoke estimate's prediction; Docker), "
        "serving (the model server beside the model in process and beside LitServe), "
        "readers (one shard reader's samples/s, in process and through loader workers, beside "
        "the same arrays in memory)",
    }
)
def bench(c: Context, name: str) -> None:
    """Run a benchmark of benchmarks/; its own arguments go after `--`: invoke bench loop.

    The training-loop benchmarks run in the project they measure: baked into build/bench/, with
    a venv of its own that later runs reuse.
    """
    if name not in BENCHMARKS:
        raise Exit(f"unknown benchmark {name!r}; choose one of: {', '.join(BENCHMARKS)}", code=2)
    from template_tools.install import project_install_command, venv_python

    script, answers = BENCHMARKS[name]
    command = [sys.executable, str(ROOT / "benchmarks" / script)]
    if answers is not None:
        project = _bake_fresh(BUILD / "bench" / name, answers)
        venv = BUILD / "bench" / f"{name}-venv"
        if not venv_python(venv).exists():
            c.run(shlex.join([sys.executable, "-m", "venv", str(venv)]))
        c.run(shlex.join(project_install_command(venv_python(venv), project)), pty=_pty())
        if name in PEERS:  # what the benchmark compares with, beside the project
            c.run(shlex.join([str(venv_python(venv)), "-m", "pip", "install", "-q", *PEERS[name]]))
        command = [str(venv_python(venv)), command[1], "--project", str(project)]
    c.run(f"{shlex.join(command)} {_after_dashes(c)}", pty=_pty())


@task(
    help={
        "answers": "key=value answers separated by commas or spaces (quoted), e.g. "
        "tracking=none,license=MIT; or 'defaults'; or 'all' for every variant the tests bake",
    }
)
def bake(c: Context, answers: str) -> None:
    """Bake one variant into build/bake/: invoke bake tracking=none | defaults | all."""
    if answers.startswith("-"):
        # invoke hands a required argument the next word, so `invoke bake --help` lands here.
        c.run(f"{PYTHON} -m invoke --search-root {shlex.quote(str(ROOT))} --help bake")
        return
    output = BUILD / "bake"
    if answers != ALL_VARIANTS:
        _bake_fresh(output, {} if answers == DEFAULTS else _choose(answers))
        return
    from template_tools import variants

    shutil.rmtree(output, ignore_errors=True)
    for variant in variants(ROOT):
        _bake_fresh(output / variant.id, variant.extra_context)


@task
def test(c: Context) -> None:
    """Run the template's whole test suite; pytest arguments go after `--`."""
    with c.cd(ROOT):
        c.run(f"{PYTHON} -m pytest --durations=10 {_after_dashes(c)}", pty=_pty())


@task
def lint(c: Context) -> None:
    """Check the template's Python with ruff and mypy, and its GitHub workflows with actionlint."""
    paths = shlex.join(name for name in TEMPLATE_PYTHON if (ROOT / name).exists())
    workflows = shlex.join(str(path) for path in sorted(WORKFLOWS.glob("*.y*ml")))
    commands = [
        f"{PYTHON} -m ruff check {paths}",
        f"{PYTHON} -m ruff format --check {paths}",
        f"{PYTHON} -m mypy",  # the files of pyproject.toml's [tool.mypy]
        f"{PYTHON} -m mypy --config-file cloudgpu/pyproject.toml",  # the package's sources
        f"{shlex.quote(_tool('actionlint'))} {workflows}",
    ]
    with c.cd(ROOT):
        failed = [command for command in commands if c.run(command, warn=True).failed]
    if failed:
        raise Exit("lint failed: " + "; ".join(failed), code=1)


@task(help={"upgrade": "move every package to its newest version, not only what changed"})
def lock(c: Context, upgrade: bool = False) -> None:
    """Regenerate the hash-locked requirements-dev.txt from requirements-dev.in with uv."""
    from template_tools.install import uv_environment

    command = [
        sys.executable,
        *("-m", "uv", "pip", "compile", "--quiet", "--generate-hashes", "--universal"),
        *("--python-version", LOCK_PYTHON, "--custom-compile-command", "invoke lock"),
        *(["--upgrade"] if upgrade else []),
        *(LOCK_INPUT, "--output-file", LOCK_FILE),
    ]
    with c.cd(ROOT):
        c.run(shlex.join(command), env=uv_environment())


# Every task above, and the image tasks as `invoke images.<task>` (images/tasks.py).
namespace = Collection.from_module(sys.modules[__name__])
namespace.add_collection(Collection.from_module(image_tasks, name="images"))
