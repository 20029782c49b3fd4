"""The GitHub workflows, the template's and the generated project's, and what CI runs here.

Each workflow must pass actionlint, zizmor (offline) and GitHub's workflow schema, and pin every
action by commit SHA. `.ci/run` must run exactly the README's test command.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TEMPLATE_DIR, git

from template_tools import bake, choices, package

TOOLS = Path(sys.executable).parent
TEMPLATE_WORKFLOWS = sorted((TEMPLATE_DIR / ".github" / "workflows").glob("*.yml"))
GENERATED_WORKFLOWS = ".github/workflows"
# `uses: owner/repo[/path]@<40 hex> # v1.2.3`: a commit that cannot move, and its release.
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+(\.\d+)*$")
# README.md marks each of its two commands with an HTML comment the page does not show.
README_COMMAND = re.compile(r"<!-- (demo|test)-command -->\n```\w*\n(.+)\n```\n")


def tool(name: str) -> str:
    """A linter installed from requirements-dev.txt, beside this Python or on PATH."""
    found = TOOLS / name if (TOOLS / name).exists() else shutil.which(name)
    assert found, f"{name} is missing: pip install --require-hashes -r requirements-dev.txt"
    return str(found)


def check(cwd: Path, *command: str) -> None:
    """Run a linter in `cwd`; fail with its output when it finds something."""
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def generated_repos(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """A project per framework (its workflow differs), each a git repository.

    actionlint looks for workflows from the repository root.
    """
    repos = []
    for framework in choices()["framework"]:
        project = bake(TEMPLATE_DIR, tmp_path_factory.mktemp(framework), {"framework": framework})
        git(project, "init", "-q")
        repos.append(project)
    return repos


def workflows_of(project: Path) -> list[Path]:
    found = sorted((project / GENERATED_WORKFLOWS).glob("*.yml"))
    assert found, f"no workflows in {project / GENERATED_WORKFLOWS}"
    return found


@pytest.fixture(scope="module")
def all_workflows(generated_repos: list[Path]) -> list[Path]:
    """The generated projects' workflows, then the template's."""
    return [*(path for repo in generated_repos for path in workflows_of(repo)), *TEMPLATE_WORKFLOWS]


def test_template_has_workflows() -> None:
    names = [path.name for path in TEMPLATE_WORKFLOWS]
    assert names == ["ci.yml", "images.yml", "release-cloudgpu.yml"]
    # GitHub's CI is this CI: .ci/run, with what it installs, not a bare `invoke test`.
    steps = yaml.safe_load(TEMPLATE_WORKFLOWS[0].read_text())["jobs"]["test"]["steps"]
    assert [step["run"] for step in steps if "ci/run" in step.get("run", "")] == [
        'sudo env "PATH=$PATH" CI=true bash .ci/run'
    ]


def test_actionlint(generated_repos: list[Path]) -> None:
    for repo in generated_repos:
        check(repo, tool("actionlint"), *map(str, workflows_of(repo)))
    check(TEMPLATE_DIR, tool("actionlint"), *map(str, TEMPLATE_WORKFLOWS))


def test_zizmor_finds_nothing(all_workflows: list[Path]) -> None:
    # The pedantic persona: informational findings too (an unnamed job, for instance).
    for path in all_workflows:
        check(path.parent, tool("zizmor"), "--offline", "--persona", "pedantic", str(path))


def test_github_workflow_schema(all_workflows: list[Path]) -> None:
    paths = [str(path) for path in all_workflows]
    check(
        TEMPLATE_DIR,
        tool("check-jsonschema"),
        "--builtin-schema",
        "vendor.github-workflows",
        *paths,
    )


def uses_lines(workflow: Path) -> list[str]:
    """Every `uses:` value of a workflow with its trailing comment, as written."""
    return re.findall(r"^\s*(?:-\s+)?uses:\s*(.+?)\s*$", workflow.read_text(), re.MULTILINE)


def test_every_action_is_pinned_by_sha(all_workflows: list[Path]) -> None:
    for workflow in all_workflows:
        jobs = yaml.safe_load(workflow.read_text())["jobs"].values()
        # Steps that use an action, and jobs that call a reusable workflow.
        users = [*jobs, *(step for job in jobs for step in job.get("steps", []))]
        uses = uses_lines(workflow)
        assert len(uses) == len([user for user in users if "uses" in user]) > 0
        assert [line for line in uses if not PINNED.match(line)] == [], workflow


def test_template_and_projects_pin_the_same_actions(all_workflows: list[Path]) -> None:
    """One commit per action across every workflow, the template's and the projects'."""
    pins: dict[str, set[str]] = {}
    for workflow in all_workflows:
        for line in uses_lines(workflow):
            pins.setdefault(line.split("@")[0], set()).add(line)
    assert {action: found for action, found in pins.items() if len(found) > 1} == {}
    ci_actions = {line.split("@")[0] for line in uses_lines(TEMPLATE_WORKFLOWS[0])}
    assert ci_actions <= set(pins)


def test_image_workflow_builds_on_main_and_tags_and_pushes_with_least_privilege(
    generated_repos: list[Path],
) -> None:
    for repo in generated_repos:
        workflow = yaml.safe_load((repo / GENERATED_WORKFLOWS / "image.yml").read_text())
        # PyYAML reads the `on` key as True.
        assert workflow[True]["push"] == {"branches": ["main"], "tags": ["v*"]}
        assert workflow["permissions"] == {"contents": "read"}
        for name, job in workflow["jobs"].items():
            pushes = any(
                step.get("with", {}).get("push") or "docker push" in step.get("run", "")
                for step in job["steps"]
            )
            assert job["permissions"] == {
                "contents": "read",
                **({"packages": "write"} if pushes else {}),
            }, name
        cpu_steps = workflow["jobs"]["cpu"]["steps"]
        runs = [step.get("run", "") for step in cpu_steps]
        smoke = next(index for index, run in enumerate(runs) if "invoke run --cpu" in run)
        push = next(index for index, run in enumerate(runs) if "docker push" in run)
        assert smoke < push, "the CPU image trains before it is pushed"
        builds = [step["with"] for job in workflow["jobs"].values() for step in job["steps"]
                  if step.get("uses", "").startswith("docker/build-push-action@")]  # fmt: skip
        assert all("cache-from" in build and "cache-to" in build for build in builds)
        assert workflow["jobs"]["gpu"]["needs"] == "cpu"


@pytest.mark.parametrize("version", choices()["python_version"])
def test_generated_ci_uses_the_chosen_python(tmp_path: Path, version: str) -> None:
    project = bake(TEMPLATE_DIR, tmp_path, {"python_version": version})
    workflow = yaml.safe_load((project / GENERATED_WORKFLOWS / "ci.yml").read_text())
    steps = workflow["jobs"]["test"]["steps"]
    setup = next(step for step in steps if step.get("uses", "").startswith("actions/setup-python@"))
    assert setup["with"]["python-version"] == version
    # GitHub expressions survive Jinja rendering.
    assert workflow["concurrency"]["group"] == "${{ github.workflow }}-${{ github.ref }}"


def test_every_job_runs_on_a_fixed_runner_image(all_workflows: list[Path]) -> None:
    for workflow in all_workflows:
        for name, job in yaml.safe_load(workflow.read_text())["jobs"].items():
            assert re.fullmatch(r"ubuntu-\d\d\.\d\d", job["runs-on"]), (workflow, name)


def test_generated_ci_gives_the_cloud_tests_what_they_skip_without(
    generated_repos: list[Path],
) -> None:
    """moto_server, Prometheus, the SDKs' Python: what the runner image lacks (it has the CLIs)."""
    for repo in generated_repos:
        steps = yaml.safe_load((repo / GENERATED_WORKFLOWS / "ci.yml").read_text())["jobs"]["test"]
        runs = [step.get("run", "") for step in steps["steps"]]
        test = next(step for step in steps["steps"] if step.get("run") == "invoke test --all")
        installs = "\n".join(runs[: runs.index("invoke test --all")])
        assert '"moto[server]"' in installs and "prometheus-pushgateway" in installs
        sdk_python = test["env"]["CLOUD_SDK_PYTHON"]
        venv = sdk_python.removesuffix("/bin/python").replace("${{ runner.temp }}", "$RUNNER_TEMP")
        sdks = "azure-ai-ml google-cloud-aiplatform skypilot parliament cloudsplaining"
        assert f'"{venv}/bin/pip" install {sdks}' in installs


def readme_commands() -> dict[str, str]:
    """The README's marked commands: {"demo": ..., "test": ...}, in the order written."""
    return dict(README_COMMAND.findall((TEMPLATE_DIR / "README.md").read_text()))


def test_readme_opens_with_the_two_commands() -> None:
    readme = (TEMPLATE_DIR / "README.md").read_text()
    commands = readme_commands()
    assert list(commands) == ["demo", "test"]
    setup = (
        "python3 -m venv .venv && .venv/bin/pip install --require-hashes -r requirements-dev.txt"
    )
    assert commands == {
        "demo": f"{setup} && .venv/bin/invoke demo",
        "test": f"{setup} && .venv/bin/invoke test",
    }
    # Right under the title: no section comes before them.
    first_section = readme.find("\n## ")
    assert first_section == -1 or readme.index(commands["test"]) < first_section


def test_ci_runs_the_readme_test_command() -> None:
    done = subprocess.run(
        ["bash", str(TEMPLATE_DIR / ".ci" / "run"), "--print-test-command"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == readme_commands()["test"]


def test_the_package_is_released_from_its_tag_by_trusted_publishing() -> None:
    release = yaml.safe_load((TEMPLATE_DIR / ".github/workflows/release-cloudgpu.yml").read_text())
    assert release[True] == {"push": {"tags": ["cloudgpu-v*"]}}  # `on:` reads as True
    [job] = release["jobs"].values()
    assert job["permissions"] == {"contents": "read", "id-token": "write"}
    assert job["environment"]["name"] == "pypi"
    uses = [step.get("uses", "") for step in job["steps"]]
    assert uses[-1].startswith("pypa/gh-action-pypi-publish@")
    assert not any("password" in step.get("with", {}) for step in job["steps"]), "no token"
    # The tag check runs the workflow's own command: it prints the version the tag must name.
    [check] = [step["run"] for step in job["steps"] if "version=$(" in step.get("run", "")]
    command = check.split("version=$(", 1)[1].split(")\n", 1)[0]
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # the tools' python, as there
    done = subprocess.run(
        command, shell=True, cwd=TEMPLATE_DIR, env={**os.environ, "PATH": path},
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == package.version()
