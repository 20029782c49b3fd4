"""Each generated project passes its own test suite and `invoke lint`.

One virtual environment per framework serves that framework's variants (helpers/venvs.py: the
install a user runs, of the variant with the most dependencies). Each variant then runs with
PYTHONPATH=<its src>, so its own code is what runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import PROJECT_TEMPLATE, TEMPLATE_DIR, VARIANTS
from helpers.venvs import SUPERSET, make_venvs, run_logged

from template_tools import bake
from template_tools.variants import Variant

# Options that change which code and dependencies a project has; one project per combination.
DISTINCT_OPTIONS = ("framework", "tracking")
# Seconds: a project's whole suite trains on CPU.
SUITE_TIMEOUT = 2400  # a slow 2-core machine ran the PyTorch suite in ~22 min
PYTEST_NO_TESTS = 5


def distinct_variants() -> list[Variant]:
    """The first variant of each combination of DISTINCT_OPTIONS."""
    found: dict[tuple[str, ...], Variant] = {}
    for variant in VARIANTS:
        key = tuple(variant.extra_context[name] for name in DISTINCT_OPTIONS)
        found.setdefault(key, variant)
    return list(found.values())


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
# The tools a project's tests may need beyond Python (cloudgpu.testing.needs): left off the
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


# The test modules of what both frameworks' projects share (the cloudgpu package, tasks.py):
# the same file in both projects, testing the same code (test_the_shared_modules_are_one_file
# checks both). Each module's second-tier tests run in one framework's second tier, named here
# (the two second tiers then take about as long); every framework runs their first-tier tests,
# as `invoke test` does.
SHARED_MODULES = {
    "tests/test_deploy.py": "pytorch",
    "tests/test_deploy_vertex_azure.py": "pytorch",
    "tests/test_estimate.py": "tensorflow",
    "tests/test_run_secrets.py": "tensorflow",
    "tests/test_serving_monitor.py": "tensorflow",
}
# What may differ under the code those modules test (the cloudgpu package they drive is the same
# wheel for both): the files of a framework's overlay (its own test helpers). Each is tested in
# every framework's first tier.
SHARED_CODE = ("tasks.py", "tests/helpers", "tests/conftest.py")
SHARED_CODE_EXCEPT: tuple[str, ...] = ()
OVERLAYS = [TEMPLATE_DIR / PROJECT_TEMPLATE / f"_{name}" for name in ("pytorch", "tensorflow")]
FIRST_TIER = ["-m", "invoke", "test", "--", "-p", "no:cacheprovider"]  # as a person types it
SECOND_TIER = ["-m", "pytest", "-p", "no:cacheprovider", "-m", "slow or needs", "-rA",
               "--durations=15"]  # fmt: skip


def shared_modules(framework: str, runs: bool) -> list[str]:
    """SHARED_MODULES whose second-tier tests `framework` runs (or, `runs` false, leaves)."""
    return [module for module, runner in SHARED_MODULES.items() if (runner == framework) == runs]


def suites(variant: Variant) -> list[Suite]:
    """The SUPERSET variant of a framework runs its whole suite as two tiers, side by side:
    `invoke test` with nothing but Python on the PATH, and the second tier (`invoke test --all`
    less the first) with every tool, less the SHARED_MODULES another framework runs; the others
    SUBSET."""
    if all(variant.extra_context.get(key) == value for key, value in SUPERSET.items()):
        left = shared_modules(variant.extra_context["framework"], runs=False)
        return [
            Suite("first-tier", [*FIRST_TIER, "--durations=15"], True),
            Suite("second-tier", [*SECOND_TIER, *(f"--deselect={module}" for module in left)]),
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
        """Its exit status and output, once it has ended (killed past `timeout` seconds). The
        output is kept in .cache/suite-logs/: what CI's time is made of, by suite (pytest's last
        line) and by test (--durations)."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        output = self.log.read_text(encoding="utf-8", errors="replace")
        kept = TEMPLATE_DIR / ".cache" / "suite-logs" / f"{self.project.parent.name}.log"
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(output, encoding="utf-8")
        return code, output


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


def passed_in(output: str, modules: list[str]) -> int:
    """How many tests of `modules` a second tier's `-rA` summary says passed (a line each,
    `PASSED tests/x.py::test[id]`) or were skipped (`SKIPPED [n] tests/x.py:12: why`)."""
    passed = re.findall(r"^PASSED (tests/[^\s:]+\.py)::.+$", output, re.MULTILINE)
    skipped = re.findall(r"^SKIPPED \[(\d+)\] (tests/[^\s:]+\.py):", output, re.MULTILINE)
    return sum(module in modules for module in passed) + sum(
        int(count) for count, module in skipped if module in modules
    )


def test_the_first_tier_is_what_invoke_test_runs_and_the_rest_is_the_second(
    suite_runs: dict[str, list[SuiteRun]],
) -> None:
    """Every test of a project runs in one of its two tiers, or (a second-tier test of
    SHARED_MODULES) in another framework's second tier: none lost between them."""
    variants = {variant.id: variant for variant in distinct_variants()}
    seconds = {}  # framework -> (its first tier's output, its second tier's)
    for vid, runs in suite_runs.items():
        if len(runs) == 2:
            first, second = (run.result(SUITE_TIMEOUT)[1] for run in runs)
            seconds[variants[vid].extra_context["framework"]] = (first, second)
    assert sorted(seconds) == sorted(set(SHARED_MODULES.values()))  # one per framework
    for framework, (first, second) in seconds.items():
        assert "the slow tests and those that need tools beyond Python" in first
        counts = [summary_counts(first), summary_counts(second)]
        ran = [c.get("passed", 0) + c.get("skipped", 0) for c in counts]
        assert ran[0] > 100 and ran[1] > 50, counts
        assert passed_in(second, shared_modules(framework, runs=True)) > 0
        assert passed_in(second, shared_modules(framework, runs=False)) == 0
        # The same files: the tests another framework ran of its share are this one's too.
        elsewhere = sum(
            passed_in(output, shared_modules(other, runs=True))
            for other, (_, output) in seconds.items()
            if other != framework
        )
        # What the second tier left out is the first tier (whose workers do not count what they
        # deselect) and the shared modules' second-tier tests that another framework runs.
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
    assert "tests/helpers/collectives.py" in skipped  # a PyTorch helper
    first, *others = [files(project) for project in projects]
    assert others and all(name in first for name in SHARED_MODULES)
    assert set(SHARED_MODULES.values()) == {v.extra_context["framework"] for v in VARIANTS}
    for other in others:
        assert set(other) == set(first)
        assert [name for name in sorted(first) if first[name] != other[name]] == []


def test_invoke_lint_passes(fresh_project: Path, project_python: Path) -> None:
    command = [str(project_python), "-m", "invoke", "lint"]
    done = run_logged(command, fresh_project, 300, project_env(fresh_project))
    assert done.returncode == 0, done.stdout
