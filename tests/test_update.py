"""`cruft update` brings a project from an older template commit to the newer one, cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import OLD_ABSENT, TemplateRepo, commit_all, git

CONFLICT_MARKERS = (b"<<<<<<< ", b"\n=======\n", b">>>>>>> ")


def cruft(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "cruft", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def cruft_create(repo: TemplateRepo, commit: str, output_dir: Path) -> Path:
    """`cruft create --checkout COMMIT`: the project folder it made."""
    output_dir.mkdir(exist_ok=True)
    cruft(output_dir, "create", str(repo.path), "--checkout", commit, "--no-input")
    [project] = output_dir.iterdir()
    return project


def cookiecutter_create(repo: TemplateRepo, commit: str, output_dir: Path) -> Path:
    """Plain `cookiecutter` from the template checked out at COMMIT: the project folder."""
    git(repo.path, "checkout", "-q", commit)
    try:
        subprocess.run(
            [
                *(sys.executable, "-m", "cookiecutter", "--no-input", "--default-config"),
                *(str(repo.path), "-o", str(output_dir)),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    finally:
        git(repo.path, "checkout", "-q", "main")
    [project] = output_dir.iterdir()
    return project


def snapshot(project: Path) -> dict[str, bytes]:
    """Every file outside .git, by relative path."""
    return {
        p.relative_to(project).as_posix(): p.read_bytes()
        for p in project.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(project).parts
    }


def update_to_new(project: Path, repo: TemplateRepo) -> None:
    """Put `project` under git, as its owner would, and `cruft update` it to the new commit."""
    git(project, "init", "-q", "-b", "main")
    commit_all(project, "project from the older template")
    cruft(project, "update", "--checkout", repo.new, "--skip-apply-ask")


@pytest.fixture(scope="module")
def fresh_new(template_repo: TemplateRepo, tmp_path_factory: pytest.TempPathFactory):
    """Files of a project made straight from the new commit."""
    return snapshot(cruft_create(template_repo, template_repo.new, tmp_path_factory.mktemp("new")))


@pytest.mark.parametrize(
    "create", [cruft_create, cookiecutter_create], ids=["cruft", "cookiecutter"]
)
def test_update_reaches_a_fresh_project_of_the_new_commit(
    create, template_repo: TemplateRepo, fresh_new: dict[str, bytes], tmp_path: Path
) -> None:
    project = create(template_repo, template_repo.old, tmp_path / "out")
    before = json.loads((project / ".cruft.json").read_text())
    assert before["commit"] == template_repo.old
    assert not (set(OLD_ABSENT) & set(snapshot(project)))
    assert snapshot(project) != fresh_new

    update_to_new(project, template_repo)

    files = snapshot(project)
    assert [name for name in files if name.endswith(".rej") or name.endswith(".orig")] == []
    conflicted = [name for name, data in files.items() if any(m in data for m in CONFLICT_MARKERS)]
    assert conflicted == []
    record = json.loads(files.pop(".cruft.json"))
    expected = dict(fresh_new)
    expected_record = json.loads(expected.pop(".cruft.json"))
    assert sorted(files) == sorted(expected)
    assert [name for name in files if files[name] != expected[name]] == []
    assert record["commit"] == record["context"]["cookiecutter"]["_commit"] == template_repo.new
    assert record == expected_record
