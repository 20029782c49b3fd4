"""Each variant bakes to the expected files, free of Jinja, lint-clean and ready to run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from binaryornot.check import is_binary
from conftest import TEMPLATE_DIR, VARIANTS, git

from template_tools import default_answers, frameworks
from template_tools.variants import Variant

# The files of a project baked with the default answers, PyTorch ({package}: the package name).
# When the template gains or loses a file, change this list.
BASE_FILES = """
.cruft.json
.dockerignore
.github/workflows/ci.yml
.github/workflows/image.yml
.gitignore
Dockerfile
LICENSE
README.md
benchmarks/cpu_scaling.py
benchmarks/gpu.py
benchmarks/gpu_check.py
benchmarks/gpu_common.py
benchmarks/http_load.py
benchmarks/scaling.py
benchmarks/serving.py
cloud.toml
configs/callbacks/default.yaml
configs/crossval.yaml
configs/data/_defaults.yaml
configs/data/digits.yaml
configs/data/files.yaml
configs/data/shards.yaml
configs/debug/fast.yaml
configs/debug/overfit.yaml
configs/debug/short.yaml
configs/evaluate.yaml
configs/experiment/digits_cnn.yaml
configs/experiment/digits_mlp.yaml
configs/hparams_search/digits_optuna.yaml
configs/hydra/default.yaml
configs/logger/jsonl.yaml
configs/logger/wandb.yaml
configs/model/cnn.yaml
configs/model/mlp.yaml
configs/monitoring/_defaults.yaml
configs/monitoring/none.yaml
configs/monitoring/prometheus.yaml
configs/optimizer/adamw.yaml
configs/optimizer/sgd.yaml
configs/paths/default.yaml
configs/scheduler/constant.yaml
configs/scheduler/warmup_cosine.yaml
configs/train.yaml
configs/trainer/cpu.yaml
configs/trainer/default.yaml
configs/trainer/gpu.yaml
image.json
monitoring/alerts.yml
monitoring/alerts_test.yml
monitoring/exporters.json
monitoring/grafana/dashboards/serving.json
monitoring/grafana/dashboards/training.json
monitoring/grafana/provisioning/dashboards/training.yml
monitoring/grafana/provisioning/datasources/prometheus.yml
pyproject.toml
requirements/cpu.txt
requirements/cuda.txt
requirements/gpu.txt
requirements/image.in
requirements/serve-cpu.txt
requirements/serve-gpu.txt
requirements/serve.in
src/{package}/__init__.py
src/{package}/cluster/__init__.py
src/{package}/cluster/fabric.py
src/{package}/cluster/nodes.py
src/{package}/cluster/run_secrets.py
src/{package}/config/__init__.py
src/{package}/config/checks.py
src/{package}/config/command.py
src/{package}/config/preflight.py
src/{package}/config/resources.py
src/{package}/config/rules.py
src/{package}/config/schema.py
src/{package}/config/sweeps.py
src/{package}/crossval.py
src/{package}/data/__init__.py
src/{package}/data/batches.py
src/{package}/data/datasets/README.md
src/{package}/data/datasets/digits.npz
src/{package}/data/shards/__init__.py
src/{package}/data/shards/cache.py
src/{package}/data/shards/index.py
src/{package}/data/shards/samples.py
src/{package}/data/shards/stream.py
src/{package}/data/shards/writer.py
src/{package}/data/preparation.py
src/{package}/data/sources.py
src/{package}/data/splits.py
src/{package}/data/summary.py
src/{package}/data/tables.py
src/{package}/data/uris.py
src/{package}/evaluate.py
src/{package}/export.py
src/{package}/launch.py
src/{package}/models/__init__.py
src/{package}/models/cnn.py
src/{package}/models/mlp.py
src/{package}/prepare.py
src/{package}/serve.py
src/{package}/tracking/__init__.py
src/{package}/tracking/exporter.py
src/{package}/tracking/gpu_metrics.py
src/{package}/tracking/live.py
src/{package}/tracking/trackers.py
src/{package}/tracking/wandb_tracker.py
src/{package}/train.py
src/{package}/training/__init__.py
src/{package}/training/checkpoint.py
src/{package}/training/contract.py
src/{package}/training/early_stopping.py
src/{package}/training/fit.py
src/{package}/training/formats.py
src/{package}/training/loop.py
src/{package}/training/outputs.py
src/{package}/training/runtime.py
src/{package}/training/schedules.py
src/{package}/training/scoring.py
src/{package}/training/signals.py
src/{package}/training/storage.py
src/{package}/training/toolchain.py
tasks.py
tests/conftest.py
tests/framework_parts.py
tests/helpers/__init__.py
tests/helpers/collectives.py
tests/helpers/datasets.py
tests/helpers/monitor_stack.py
tests/helpers/seen_samples.py
tests/helpers/sync_check.py
tests/test_azureml_jobs.py
tests/test_bad_input.py
tests/test_benchmarks.py
tests/test_checkpoint.py
tests/test_cluster.py
tests/test_configs.py
tests/test_contract.py
tests/test_data.py
tests/test_ddp.py
tests/test_deploy.py
tests/test_deploy_vertex_azure.py
tests/test_estimate.py
tests/test_export.py
tests/test_gpu.py
tests/test_gpu_metrics.py
tests/test_image_tasks.py
tests/test_launch.py
tests/test_layout.py
tests/test_loop.py
tests/test_monitoring.py
tests/test_resume.py
tests/test_run_secrets.py
tests/test_serve.py
tests/test_serving_monitor.py
tests/test_shard_loader.py
tests/test_shards.py
tests/test_sweep.py
tests/test_tables.py
tests/test_tasks.py
tests/test_train.py
tests/test_wandb.py
"""
# How an answer other than the default changes that list.
CHANGES = {
    ("framework", "tensorflow"): {
        "add": [
            "src/{package}/training/callbacks.py",
            "src/{package}/training/quiet_start.py",
            "tests/helpers/host_reads.py",
            "tests/test_distributed.py",
        ],
        "remove": [
            "src/{package}/training/early_stopping.py",
            "tests/helpers/collectives.py",
            "tests/helpers/seen_samples.py",
            "tests/helpers/sync_check.py",
            "tests/test_ddp.py",
        ],
    },
    ("tracking", "none"): {
        "remove": [
            "configs/logger/wandb.yaml",
            "src/{package}/tracking/wandb_tracker.py",
            "tests/test_wandb.py",
        ]
    },
    ("license", "Proprietary"): {"remove": ["LICENSE"]},
}

# A `{{` after `$` is a GitHub Actions expression, which belongs in a workflow file.
JINJA_LEFT = re.compile(rb"(?<!\$)\{\{|\{%")
TASK_ROW = re.compile(r"^  (\S+) *(.*)$", re.MULTILINE)
HEAVY_IMPORTS = {"torch", "tensorflow", "hydra", "omegaconf", "numpy", "sklearn", "wandb"}
# Words that give a framework away: a project of the other framework holds none of them.
FRAMEWORK_WORDS = {"pytorch": [b"torch"], "tensorflow": [b"tensorflow", b"keras"]}
# Checks must not write caches into the shared baked projects.
QUIET_ENV = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}


def expected_files(answers: dict[str, str]) -> set[str]:
    """BASE_FILES with CHANGES applied for `answers`."""
    package = answers["package_name"]
    files = set(BASE_FILES.format(package=package).split())
    for (option, value), change in CHANGES.items():
        if answers[option] == value:
            files |= {path.format(package=package) for path in change.get("add", [])}
            files -= {path.format(package=package) for path in change.get("remove", [])}
    return files


def files_in(project: Path) -> set[str]:
    return {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}


def run(project: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=project, env=QUIET_ENV, capture_output=True, text=True, timeout=120
    )


def test_file_set(project: Path, variant: Variant) -> None:
    answers = default_answers(extra_context=variant.extra_context)
    assert files_in(project) == expected_files(answers)


def test_no_jinja_left(project: Path) -> None:
    # Binary files are copied as they are, as cookiecutter does; monitoring/ holds Prometheus's
    # and Grafana's own templates ({{ $labels.run }}), copied without rendering.
    texts = [
        name
        for name in sorted(files_in(project))
        if not is_binary(str(project / name)) and not name.startswith("monitoring/")
    ]
    assert [name for name in texts if JINJA_LEFT.search((project / name).read_bytes())] == []
    assert [name for name in files_in(project) if "{" in name] == []


def test_ruff_passes_with_the_projects_config(project: Path) -> None:
    check = run(project, sys.executable, "-m", "ruff", "check", "--no-cache", ".")
    assert check.returncode == 0, check.stdout + check.stderr
    form = run(project, sys.executable, "-m", "ruff", "format", "--check", "--no-cache", ".")
    assert form.returncode == 0, form.stdout + form.stderr


# A module past this is usually two (STYLE.md); tests may be longer.
MAX_MODULE_LINES = 300


def long_modules(root: Path, python: list[Path]) -> dict[str, int]:
    """The modules of `python` (tests and cloudgpu.testing's stand-ins of the clouds' APIs aside)
    longer than MAX_MODULE_LINES: name -> lines."""
    lengths = {
        path.relative_to(root).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in python
        if not {"tests", "testing"} & set(path.relative_to(root).parts)
    }
    return {name: lines for name, lines in lengths.items() if lines > MAX_MODULE_LINES}


def test_no_module_of_a_project_is_over_300_lines(project: Path) -> None:
    python = sorted(project.rglob("*.py"))
    assert len(python) > 60
    assert long_modules(project, python) == {}


def test_no_module_of_the_template_is_over_300_lines() -> None:
    ours = [TEMPLATE_DIR / "tasks.py"] + [
        path
        for folder in ("template_tools", "hooks", "benchmarks", "images", "cloudgpu/src")
        for path in sorted((TEMPLATE_DIR / folder).rglob("*.py"))
    ]
    assert len(ours) > 20
    assert long_modules(TEMPLATE_DIR, ours) == {}


def test_tasks_import_no_heavy_modules(project: Path) -> None:
    code = f"import sys, tasks; print(sorted(set({sorted(HEAVY_IMPORTS)}) & set(sys.modules)))"
    done = run(project, sys.executable, "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_invoke_lists_every_task_with_its_docstring(project: Path) -> None:
    done = run(project, sys.executable, "-m", "invoke", "--list")
    assert done.returncode == 0, done.stderr
    # A task's row starts two spaces in; a wrapped docstring continues further in.
    rows = dict(TASK_ROW.findall(done.stdout))
    assert "train" in rows
    assert [name for name, doc in rows.items() if not doc] == []


def test_pyproject_is_toml_with_the_chosen_answers(project: Path, variant: Variant) -> None:
    answers = default_answers(extra_context=variant.extra_context)
    pyproject = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    meta = pyproject["project"]
    assert meta["name"] == answers["project_slug"]
    assert meta["requires-python"] == f">={answers['python_version']}"
    target = "py" + answers["python_version"].replace(".", "")
    assert pyproject["tool"]["ruff"]["target-version"] == target
    assert meta.get("license") == (
        None if answers["license"] == "Proprietary" else answers["license"]
    )
    has_wandb = any(dep.startswith("wandb") for dep in meta["dependencies"])
    assert has_wandb == (answers["tracking"] == "wandb")


NO_TRACKING = [v.id for v in VARIANTS if v.extra_context["tracking"] == "none"]


# The answers record lists every option's choices (cookiecutter.json's _choices), whichever
# were taken: the word checks below read the rest of the project.
RECORD = ".cruft.json"


@pytest.mark.parametrize("variant_id", NO_TRACKING)
def test_no_wandb_without_tracking(baked: dict[str, Path], variant_id: str) -> None:
    project = baked[variant_id]
    mentions = [
        name
        for name in sorted(files_in(project) - {RECORD})
        if "wandb" in name.lower() or b"wandb" in (project / name).read_bytes().lower()
    ]
    assert mentions == []


def test_no_word_of_the_other_framework(project: Path, variant: Variant) -> None:
    chosen = variant.extra_context["framework"]
    others = [word for name, words in FRAMEWORK_WORDS.items() if name != chosen for word in words]
    mentions = [
        name
        for name in sorted(files_in(project) - {RECORD})
        for word in others
        if word in name.lower().encode() or word in (project / name).read_bytes().lower()
    ]
    assert mentions == []


def test_pinned_framework_is_the_catalogs(project: Path, variant: Variant) -> None:
    """pyproject.toml pins the release frameworks.json checked the Python versions of."""
    answers = default_answers(extra_context=variant.extra_context)
    release = frameworks()[answers["framework"]]
    pin = f'"{release["package"]}=={release["version"]}"'
    assert pin in (project / "pyproject.toml").read_text(encoding="utf-8")


def test_default_project_records_its_answers(default_project: Path) -> None:
    answers = default_answers()
    assert default_project.name == answers["project_slug"] == "cloud-gpu-project"
    assert (default_project / "src" / answers["package_name"]).is_dir()
    record = json.loads((default_project / ".cruft.json").read_text(encoding="utf-8"))
    commit = git(TEMPLATE_DIR, "rev-parse", "HEAD")
    assert record["template"] == str(TEMPLATE_DIR)
    assert record["commit"] == commit
    assert record["checkout"] is None
    assert record["directory"] is None
    assert record["context"]["cookiecutter"] == {
        **answers,
        "_template": str(TEMPLATE_DIR),
        "_commit": commit,
    }


def test_git_tracks_every_file_a_project_is_made_with(project: Path, tmp_path: Path) -> None:
    """The project's .gitignore keeps out what runs make (outputs/, a data/ folder of the user's
    files), never a file of the project itself: `data/` unanchored had left the package's
    src/<package>/data/ out of every commit."""
    repository = ["git", f"--git-dir={tmp_path / 'git'}", f"--work-tree={project}"]
    subprocess.run([*repository, "init", "--quiet"], check=True, timeout=60)
    ignored = subprocess.run(
        [*repository, "check-ignore", "--no-index", "--stdin"],
        input="\n".join(sorted(files_in(project))),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ignored.stdout.split() == []
