"""Bad answers stop the real cookiecutter and cruft CLIs with a clear message and no folder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEMPLATE_DIR, TemplateRepo


def cookiecutter(output_dir: Path, *answers: str) -> subprocess.CompletedProcess[str]:
    """`cookiecutter --no-input TEMPLATE key=value...` into `output_dir`."""
    return subprocess.run(
        [
            *(sys.executable, "-m", "cookiecutter", "--no-input", "--default-config"),
            *("-o", str(output_dir), str(TEMPLATE_DIR), *answers),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


BAD_ANSWERS = {  # id: (key=value answers, what stderr must say)
    "leading-digit": (["project_slug=3d-vision"], ["'3d-vision'", "must start with a letter"]),
    "uppercase-slug": (["project_slug=My-Project"], ["'My-Project'", "must be lowercase"]),
    "space-in-slug": (["project_slug=my project"], ["'my project'", "must not contain spaces"]),
    "empty-slug": (["project_name=!!!"], ["project_slug is empty", "'!!!'"]),
    "keyword-package": (["package_name=class"], ["'class'", "Python keyword"]),
    "stdlib-package": (["package_name=json"], ["'json'", "standard-library module"]),
    "shadowing-package": (["package_name=torch"], ["'torch'", "dependency the project imports"]),
    "gpu-not-on-cloud": (
        ["default_cloud=azure", "default_gpu=a10g"],
        ["'a10g'", "'azure'", "t4, a100, h100"],
    ),
}


@pytest.mark.parametrize(("answers", "expected"), BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
def test_bad_answer_stops_cookiecutter(tmp_path: Path, answers: list[str], expected: list[str]):
    done = cookiecutter(tmp_path, *answers)
    assert done.returncode != 0
    for text in expected:
        assert text in done.stderr, done.stderr
    assert list(tmp_path.iterdir()) == [], "cookiecutter left a half-made project"


def test_unicode_project_name_bakes_a_valid_slug(tmp_path: Path) -> None:
    name = "Café Über-Model! (v2)"
    done = cookiecutter(tmp_path, f"project_name={name}")
    assert done.returncode == 0, done.stderr
    project = tmp_path / "cafe-uber-model-v2"
    assert [p.name for p in tmp_path.iterdir()] == [project.name]
    assert (project / "src" / "cafe_uber_model_v2" / "__init__.py").is_file()
    answers = json.loads((project / ".cruft.json").read_text(encoding="utf-8"))
    assert answers["context"]["cookiecutter"]["project_name"] == name


def test_quotes_and_backslashes_in_answers_reach_the_hooks_intact(tmp_path: Path) -> None:
    author = 'Ada "The Countess" Lovelace \\ Byron \'\'\' """'
    done = cookiecutter(tmp_path, f"author_name={author}", "license=BSD-3-Clause")
    assert done.returncode == 0, done.stderr
    project = tmp_path / "cloud-gpu-project"
    answers = json.loads((project / ".cruft.json").read_text(encoding="utf-8"))
    assert answers["context"]["cookiecutter"]["author_name"] == author
    assert f", {author}\n" in (project / "LICENSE").read_text(encoding="utf-8")


def test_bad_answer_stops_cruft_create(tmp_path: Path, template_repo: TemplateRepo) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "cruft", "create", str(template_repo.path), "--no-input"),
            *("--output-dir", str(tmp_path), "--extra-context", '{"package_name": "typing"}'),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "package_name 'typing' is a standard-library module" in done.stderr
    assert list(tmp_path.iterdir()) == []
