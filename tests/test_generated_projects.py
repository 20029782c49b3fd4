"""Each generated project passes its own test suite and `invoke lint`.

One virtual environment per framework serves that framework's variants: it is made with
`python -m venv` and `pip install -e "<project>[dev]"` of the variant with the most dependencies,
so the install a user runs is the one tested, and cached under .cache/ by a hash of those
dependencies. Each variant then runs with PYTHONPATH=<its src>, so its own code is what runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PROJECT_TEMPLATE, TEMPLATE_DIR, VARIANTS

from template_tools import bake
from template_tools.install import project_install_command, venv_python
from template_tools.variants import Variant

VENVS = TEMPLATE_DIR / ".cache" / "generated-venv"
EXTRAS = ("dev",)
# With the framework, the answers whose project depends on every package the others do.
SUPERSET = {"tracking": "wandb"}
# Options that change which code and dependencies a project has; one project per combination.
DISTINCT_OPTIONS = ("framework", "tracking")
READY = ".complete"  # written last: a venv without it was interrupted
# Seconds: a project's whole suite trains on CPU; installing torch and friends takes minutes.
SUITE_TIMEOUT = 2400  # a slow 2-core machine ran the PyTorch suite in ~22 min
INSTALL_TIMEOUT = 1800
PYTEST_NO_TESTS = 5


def distinct_variants() -> list[Variant]:
    """The first variant of each combination of DISTINCT_OPTIONS."""
    found: dict[tuple[str, ...], Variant] = {}
    for variant in VARIANTS:
        key = tuple(variant.extra_context[name] for name in DISTINCT_OPTIONS)
        found.setdefault(key, variant)
    return list(found.values())


def dependency_key(project: Path) -> str:
    """A hash of what the venv holds: the Python, the project's dependencies and the extras."""
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    optional = meta.get("optional-dependencies", {})
    wanted = {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "dependencies": meta["dependencies"],
        "extras": {name: optional[name] for name in EXTRAS},
    }
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


def run_logged(
    command: list[str], cwd: Path, timeout: int, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `command`; its output, stdout and stderr merged, comes back in the result."""
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def create_venv(venv: Path, project: Path) -> None:
    """Make `venv` and install `project` into it, as a user does; fail with pip's output."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    command = project_install_command(venv_python(venv), project, EXTRAS)
    done = run_logged(command, project, INSTALL_TIMEOUT)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout[-6000:]}"
    (venv / READY).write_text(" ".join(command) + "\n", encoding="utf-8")


def shared_venv(framework: str, superset: Path) -> Path:
    """The Python of `framework`'s shared venv, made (from its SUPERSET project) or reused.

    Test runs in the same checkout (several terminals) take turns through a lock file.
    """
    venv = VENVS / f"{framework}-{dependency_key(superset)}"
    VENVS.mkdir(parents=True, exist_ok=True)
    with (VENVS / f".{framework}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / READY).exists():
            # A venv is a gigabyte or more: keep only the current one of each framework.
            for stale in VENVS.glob(f"{framework}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            create_venv(venv, superset)
    return venv_python(venv)


def make_venvs(supersets: dict[str, Path]) -> dict[str, Path]:
    """framework -> the Python of its shared venv, every framework's made at once (two pip
    installs side by side take little longer than one)."""
    with ThreadPoolExecutor(len(supersets)) as pool:
        made = {
            name: pool.submit(shared_venv, name, project) for name, project in supersets.items()
        }
    return {name: future.result() for name, future in made.items()}


@pytest.fixture(scope="session")
def venvs(background: Background) -> dict[str, Path]:
    """framework -> the Python of its shared venv, once the background has made them."""
    return background.venvs()


@pytest.fixture
def project_python(venvs: dict[str, Path], fresh_variant: Variant) -> Path:
    """The shared venv's Python for the current variant's framework."""
    return venvs[fresh_variant.extra_context["framework"]]


@pytest.fixture(params=distinct_variants(), ids=lambda variant: variant.id)
def fresh_variant(request: pytest.FixtureRequest) -> Variant:
    """Each variant of distinct_variants() in turn."""
    return request.param


@pytest.fixture
def fresh_project(fresh_variant: Variant, tmp_path: Path) -> Path:
    """The current variant baked for this test alone: its suite writes outputs into it."""
    return bake(TEMPLATE_DIR, tmp_path, fresh_variant.extra_context)


def project_env(project: Path) -> dict[str, str]:
    """The environment that runs `project`'s own code from the shared venv. mypy keeps its cache
    of the shared venv's packages (torch's stubs take a minute) where every variant finds it."""
    return {
        **os.environ,
        "PYTHONPATH": str(project / "src"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "MYPY_CACHE_DIR": str(TEMPLATE_DIR / ".cache" / "mypy"),
    }


def test_distinct_variants_cover_every_combination() -> None:
    combos = {tuple(v.extra_context[name] for name in DISTINCT_OPTIONS) for v in VARIANTS}
    assert len(distinct_variants()) == len(combos) >= 2


def test_the_project_imports_its_own_code(fresh_project: Path, project_python: Path) -> None:
    package = next(path.name for path in (fresh_project / "src").iterdir() if path.is_dir())
    code = f"import {package}; print({package}.__file__)"
    done = run_logged(
        [str(project_python), "-c", code], fresh_project, 120, project_env(fresh_project)
    )
    assert done.returncode == 0, done.stdout
    assert Path(done.stdout.strip().splitlines()[-1]).is_relative_to(fresh_project)


# What a variant without every dependency runs of its suite: the modules whose code or configs
# differ with the tracking choice (the logger group, the default config, the tasks and their
# lint), not slow. The rest is the same code as the SUPERSET variant's, which runs it all.
SUBSET = ["tests/test_train.py", "tests/test_configs.py", "tests/test_tasks.py",
          "tests/test_contract.py", "-m", "not slow and not needs"]  # fmt: skip
# The tools a project's tests may need beyond Python (its tests/helpers/needs.py): left off the
# PATH of its first tier, which must pass with nothing but the project's venv.
TOOLS = {"aws", "moto_server", "gcloud", "gsutil", "bq", "az", "prometheus", "promtool",
         "prometheus-pushgateway", "prometheus-node-exporter", "docker", "dockerd",
         "session-manager-plugin", "sky"}  # fmt: skip
TOOL_VARIABLES = ("AZ_CLI", "CLOUD_SDK_PYTHON")


@dataclass(frozen=True)
class Suite:
    """One run of a project's own tests: the command (its own `invoke test` as a user types it,
    or pytest on a selection) and whether it runs with nothing but Python."""

    name: str
    args: list[str]
    bare: bool = False


# The test modules of what both frameworks' projects share (cloud/, tasks/ but framework.py):
# the same file in both projects, testing the same code (test_the_shared_modules_are_one_file
# checks both). Their second-tier tests run in the first framework's second tier only; every
# other framework runs their first-tier tests, as `invoke test` does.
SHARED_MODULES = ("tests/test_cloud_aws.py", "tests/test_cloud_azure.py",
                  "tests/test_cloud_gcp.py", "tests/test_cloud_monitor.py",
                  "tests/test_cloud_plan.py", "tests/test_iam_policies.py",
                  "tests/test_managed_jobs.py", "tests/test_run_secrets.py",
                  "tests/test_startup_script.py")  # fmt: skip
# What may differ under the code those modules test: what the framework's image needs of a GPU
# (cloud/image.json), and the files of a framework's overlay (tasks/framework.py: how it starts
# on several devices; its own test helpers). Each is tested in every framework's first tier.
SHARED_CODE = ("cloud", "tasks", "tests/helpers", "tests/conftest.py")
SHARED_CODE_EXCEPT = ("cloud/image.json",)
OVERLAYS = [TEMPLATE_DIR / PROJECT_TEMPLATE / f"_{name}" for name in ("pytorch", "tensorflow")]
SECOND_TIER = ["-m", "pytest", "-p", "no:cacheprovider", "-m", "slow or needs", "-rA"]


def runs_shared_modules(variant: Variant) -> bool:
    """Whether `variant`'s second tier runs SHARED_MODULES: the first framework's does."""
    return variant.extra_context["framework"] == VARIANTS[0].extra_context["framework"]


def suites(variant: Variant) -> list[Suite]:
    """The SUPERSET variant of a framework runs its whole suite as two tiers, side by side:
    `invoke test` with nothing but Python on the PATH, and the second tier (`invoke test --all`
    less the first) with every tool, less SHARED_MODULES but in one framework; the others
    SUBSET."""
    if all(variant.extra_context.get(key) == value for key, value in SUPERSET.items()):
        shared = [] if runs_shared_modules(variant) else [f"--deselect={m}" for m in SHARED_MODULES]
        return [
            Suite("first-tier", ["-m", "invoke", "test", "--", "-p", "no:cacheprovider"], True),
            Suite("second-tier", [*SECOND_TIER, *shared]),
        ]
    return [Suite("subset", ["-m", "pytest", "-p", "no:cacheprovider", *SUBSET])]


def bare_path(folder: Path) -> str:
    """A PATH of one folder linking every program of this PATH but TOOLS."""
    folder.mkdir(parents=True, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            link = folder / entry.name
            if entry.name in TOOLS or link.exists() or not os.access(entry.path, os.X_OK):
                continue
            link.symlink_to(entry.path)
    return str(folder)


@dataclass
class SuiteRun:
    """One suite of a variant, running in the background; its output goes to `log`."""

    project: Path
    process: subprocess.Popen[bytes]
    log: Path

    def result(self, timeout: float) -> tuple[int, str]:
        """Its exit status and output, once it has ended (killed past `timeout` seconds)."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        return code, self.log.read_text(encoding="utf-8", errors="replace")


def start_suite(suite: Suite, project: Path, python: Path) -> SuiteRun:
    env = project_env(project)
    if suite.bare:
        env = {key: value for key, value in env.items() if key not in TOOL_VARIABLES}
        env["PATH"] = f"{python.parent}{os.pathsep}{bare_path(project.parent / 'bare-bin')}"
    log = project.parent / f"{suite.name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(python), *suite.args], cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    return SuiteRun(project, process, log)


class Background:
    """The shared venvs made, then every variant's suites started, in a thread of this session:
    the template's own tests run meanwhile (a pip install waits on downloads and disks, which a
    Docker build or a bake does not). The projects are baked before, here: cookiecutter changes
    the working folder, which a thread must not do under the tests that run beside it."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        frameworks = sorted({v.extra_context["framework"] for v in distinct_variants()})
        self._supersets = {
            name: bake(TEMPLATE_DIR, tmp_path_factory.mktemp(name), {**SUPERSET, "framework": name})
            for name in frameworks
        }
        self._projects: dict[str, list[tuple[Suite, Path]]] = {}
        for variant in distinct_variants():  # a project for each suite: they write outputs
            self._projects[variant.id] = [
                (suite, bake(TEMPLATE_DIR, tmp_path_factory.mktemp(f"{variant.id}-{suite.name}"),
                             variant.extra_context))
                for suite in suites(variant)
            ]  # fmt: skip
        self.runs: dict[str, list[SuiteRun]] = {}
        self._pythons: dict[str, Path] = {}
        self._made = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="project-suites", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            self._pythons = make_venvs(self._supersets)
            self._made.set()
            for variant in distinct_variants():
                python = self._pythons[variant.extra_context["framework"]]
                self.runs[variant.id] = [
                    start_suite(suite, project, python)
                    for suite, project in self._projects[variant.id]
                ]
        except BaseException as error:  # raised again in the tests that wait for the work
            self._error = error
            self._made.set()

    def started(self) -> bool:
        return self._thread.is_alive() or self._error is None

    def venvs(self) -> dict[str, Path]:
        self._made.wait()
        if self._error is not None:
            raise self._error
        return self._pythons

    def suites(self) -> dict[str, list[SuiteRun]]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.runs

    def stop(self) -> None:
        """Nothing left behind: suites still running are killed."""
        self._thread.join()
        for run in (run for runs in self.runs.values() for run in runs):
            if run.process.poll() is None:
                run.process.kill()
                run.process.wait()


@pytest.fixture(scope="session")
def background(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Background]:
    work = Background(tmp_path_factory)
    yield work
    work.stop()


@pytest.fixture(scope="session")
def suite_runs(background: Background) -> dict[str, list[SuiteRun]]:
    """Every variant's suites, once started. Each spends most of its time in one process
    (imports, small models on one core), so side by side they take little longer than the
    slowest alone, where one after another they took the sum (17 minutes)."""
    runs = background.suites()
    assert len([run for runs in runs.values() for run in runs]) == 2 * 2 + 2  # two tiers of
    return runs  # each framework's superset, and a subset of each framework's other variant


def test_every_suite_starts(background: Background) -> None:
    """The first test of a session (conftest.py orders them): the venvs are made and the suites
    run in the background while the rest of the session does; the tests that wait for them
    come last."""
    assert background.started()


@pytest.mark.timeout(SUITE_TIMEOUT + 60)
def test_the_projects_own_tests_pass(
    fresh_variant: Variant, suite_runs: dict[str, list[SuiteRun]]
) -> None:
    for run in suite_runs[fresh_variant.id]:
        code, output = run.result(SUITE_TIMEOUT)
        assert code != PYTEST_NO_TESTS, f"{run.log.name}: the project collected no tests:\n{output}"
        assert code == 0, f"{run.log.name}:\n{output[-8000:]}"
        if os.environ.get("CI"):  # in CI nothing is skipped but what needs a GPU this machine lacks
            skipped = [line for line in output.splitlines() if line.startswith("SKIPPED")]
            assert [line for line in skipped if "CUDA GPU" not in line] == [], run.log.name


def summary_counts(output: str) -> dict[str, int]:
    """pytest's last line, `240 passed, 5 skipped, 80 deselected in 181.36s`, as counts."""
    last = [line for line in output.splitlines() if re.search(r" in [\d.]+s", line)][-1]
    return {word: int(count) for count, word in re.findall(r"(\d+) ([a-z]+)", last)}


def in_shared_modules(output: str) -> int:
    """How many tests of SHARED_MODULES a second tier's `-rA` summary says passed (a line
    each, `PASSED tests/x.py::test[id]`) or were skipped (`SKIPPED [n] tests/x.py:12: why`)."""
    passed = re.findall(r"^PASSED (tests/[^\s:]+\.py)::.+$", output, re.MULTILINE)
    skipped = re.findall(r"^SKIPPED \[(\d+)\] (tests/[^\s:]+\.py):", output, re.MULTILINE)
    return sum(module in SHARED_MODULES for module in passed) + sum(
        int(count) for count, module in skipped if module in SHARED_MODULES
    )


def test_the_first_tier_is_what_invoke_test_runs_and_the_rest_is_the_second(
    suite_runs: dict[str, list[SuiteRun]],
) -> None:
    """Every test of a project runs in one of its two tiers, or (a second-tier test of
    SHARED_MODULES) in the first framework's second tier: none lost between them."""
    tiered = {vid: runs for vid, runs in suite_runs.items() if len(runs) == 2}
    assert len(tiered) == 2  # one per framework
    outputs = {vid: [run.result(SUITE_TIMEOUT)[1] for run in runs] for vid, runs in tiered.items()}
    variants = {variant.id: variant for variant in distinct_variants()}
    (runner,) = [vid for vid in tiered if runs_shared_modules(variants[vid])]
    shared = in_shared_modules(outputs[runner][1])
    assert shared > 20, "the first framework's second tier runs the shared modules"
    for vid, (first, second) in outputs.items():
        assert "the slow tests and those that need tools beyond Python" in first
        counts = [summary_counts(first), summary_counts(second)]
        ran = [c.get("passed", 0) + c.get("skipped", 0) for c in counts]
        assert ran[0] > 100 and ran[1] > 50, counts
        elsewhere = 0 if vid == runner else shared  # the same files: the same tests
        assert in_shared_modules(second) == shared - elsewhere
        # What the second tier left out is the first tier (whose workers do not count what they
        # deselect) and, but in one framework, the shared modules' second-tier tests.
        assert counts[1]["deselected"] == ran[0] + elsewhere, counts


def test_the_shared_modules_are_one_file_in_both_projects(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """SHARED_MODULES, and the code they test (SHARED_CODE but SHARED_CODE_EXCEPT), are the same
    bytes in every framework's project: running them in one framework runs them for all."""
    projects = [
        bake(TEMPLATE_DIR, tmp_path_factory.mktemp(variant.id), variant.extra_context)
        for variant in distinct_variants()
        if all(variant.extra_context.get(key) == value for key, value in SUPERSET.items())
    ]

    def files(project: Path) -> dict[str, bytes]:
        paths = [project / name for name in (*SHARED_MODULES, *SHARED_CODE)]
        found = [p for path in paths for p in ([path] if path.is_file() else path.rglob("*"))]
        return {
            p.relative_to(project).as_posix(): p.read_bytes()
            for p in found
            if p.is_file() and p.relative_to(project).as_posix() not in skipped
        }

    overlaid = {p.relative_to(o).as_posix() for o in OVERLAYS for p in o.rglob("*") if p.is_file()}
    skipped = {*SHARED_CODE_EXCEPT, *overlaid}
    assert "tasks/framework.py" in skipped
    first, *others = [files(project) for project in projects]
    assert others and all(name in first for name in SHARED_MODULES)
    for other in others:
        assert set(other) == set(first)
        assert [name for name in sorted(first) if first[name] != other[name]] == []


def test_invoke_lint_passes(fresh_project: Path, project_python: Path) -> None:
    command = [str(project_python), "-m", "invoke", "lint"]
    done = run_logged(command, fresh_project, 300, project_env(fresh_project))
    assert done.returncode == 0, done.stdout
