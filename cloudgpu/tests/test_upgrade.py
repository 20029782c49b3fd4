"""invoke upgrade, as a user types it: a git pin moves to the newest cloudgpu-vX tag of its
repository (or the one named), in a copy of the baked project; what cannot move says why in one
line."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from baked_project import PROJECT_ROOT, invoke_cli, project_env
from cloudgpu.tasks.upgrade import GIT


def tagged_repository(folder: Path, versions: list[str]) -> str:
    """A git repository whose commits are tagged cloudgpu-v<version>; its file:// URL."""
    git = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    for version in versions:
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", version], check=True)
        subprocess.run([*git, "tag", f"cloudgpu-v{version}"], check=True)
    subprocess.run([*git, "tag", "unrelated-v99.0.0"], check=True)
    return folder.resolve().as_uri()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the baked project pinned to cloudgpu 0.1.0 of a repository with later tags."""
    url = tagged_repository(tmp_path / "template", ["0.1.0", "0.2.0", "0.10.0"])
    copy = Path(shutil.copytree(PROJECT_ROOT, tmp_path / "project"))
    pyproject = copy / "pyproject.toml"
    pin = f'"cloudgpu @ git+{url}@cloudgpu-v0.1.0#subdirectory=cloudgpu"'
    text = pyproject.read_text()
    line = next(line for line in text.splitlines() if line.strip().startswith('"cloudgpu'))
    pyproject.write_text(text.replace(line, f"    {pin},"))
    return copy


def upgrade(project: Path, *args: str) -> subprocess.CompletedProcess:
    return invoke_cli("upgrade", "--no-install", *args, cwd=project)


def pinned(project: Path) -> str:
    found = GIT.search((project / "pyproject.toml").read_text())
    assert found, "the git pin is still there"
    return found["version"]


def test_a_git_pin_moves_to_the_newest_tag_and_then_stays(project: Path) -> None:
    done = upgrade(project)
    assert done.returncode == 0, done.stderr
    assert "cloudgpu 0.1.0 -> 0.10.0 in pyproject.toml" in done.stdout  # 0.10 is newer than 0.2
    assert pinned(project) == "0.10.0"
    assert "#subdirectory=cloudgpu" in (project / "pyproject.toml").read_text()
    again = upgrade(project)
    assert again.returncode == 0 and "at 0.10.0 already" in again.stdout, again.stdout


def test_a_named_release_is_the_one_pinned(project: Path) -> None:
    done = upgrade(project, "--to", "0.2.0")
    assert done.returncode == 0, done.stderr
    assert pinned(project) == "0.2.0"


def test_a_release_that_is_not_tagged_is_refused_with_the_choices(project: Path) -> None:
    before = (project / "pyproject.toml").read_text()
    done = upgrade(project, "--to", "9.9.9")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --to 9.9.9: no such release; choose from 0.1.0, 0.2.0, 0.10.0"
    )
    assert (project / "pyproject.toml").read_text() == before


def test_a_clones_copy_has_nothing_to_move(tmp_path: Path) -> None:
    copy = Path(shutil.copytree(PROJECT_ROOT, tmp_path / "project"))  # the tests' file: pin
    done = upgrade(copy)
    assert done.returncode == 2
    assert "a clone's copy of cloudgpu (a file: pin)" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.fixture
def pypi_project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the baked project pinned to cloudgpu==0.1.0, and an environment whose pip finds
    releases 0.1.0, 0.2.0 and 0.10.0 (a folder of wheels, as a mirror lists them)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("0.1.0", "0.2.0", "0.10.0"):
        (wheels / f"cloudgpu-{version}-py3-none-any.whl").touch()
    copy = Path(shutil.copytree(PROJECT_ROOT, tmp_path / "project"))
    pyproject = copy / "pyproject.toml"
    text = pyproject.read_text()
    line = next(line for line in text.splitlines() if line.strip().startswith('"cloudgpu'))
    pyproject.write_text(text.replace(line, '    "cloudgpu==0.1.0",'))
    return copy, {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}


def pypi_upgrade(project: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess:
    folder, pip = project
    return invoke_cli("upgrade", "--no-install", *args, cwd=folder, env=project_env(**pip))


def test_a_pypi_pin_moves_to_the_newest_release_pip_lists(pypi_project) -> None:
    done = pypi_upgrade(pypi_project)
    assert done.returncode == 0, done.stderr
    assert "cloudgpu 0.1.0 -> 0.10.0 in pyproject.toml" in done.stdout
    assert '"cloudgpu==0.10.0"' in (pypi_project[0] / "pyproject.toml").read_text()


@pytest.mark.parametrize(
    ("to", "error"),
    [
        ("9.9.9", "error: --to 9.9.9: no such release; choose from 0.1.0, 0.2.0, 0.10.0"),
        ("latest", "error: --to latest: not a release number (X.Y.Z, e.g. 0.2.0)"),
    ],
)
def test_a_pypi_release_the_index_does_not_have_is_refused(pypi_project, to, error) -> None:
    """Checked against the index before the pin changes: a typo once became the pin, and the
    install after it failed with pyproject.toml already changed."""
    before = (pypi_project[0] / "pyproject.toml").read_text()
    done = pypi_upgrade(pypi_project, "--to", to)
    assert (done.returncode, done.stderr.strip()) == (2, error)
    assert (pypi_project[0] / "pyproject.toml").read_text() == before
