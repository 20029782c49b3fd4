"""Answers are checked as they are given: the real cookiecutter and cruft CLIs ask a bad answer
again at a question, and stop a bad command-line answer with one line and no folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEMPLATE_DIR, TemplateRepo, git


def cookiecutter(
    output_dir: Path, *answers: str, typed: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`cookiecutter --no-input TEMPLATE key=value...` into `output_dir`; with `typed`, no
    `--no-input`: the questions are asked and `typed` is what the user types at them. `env`:
    variables added to this one's environment."""
    flags = ["--default-config"] if typed is not None else ["--no-input", "--default-config"]
    return subprocess.run(
        [
            *(sys.executable, "-m", "cookiecutter", *flags),
            *("-o", str(output_dir), str(TEMPLATE_DIR), *answers),
        ],
        input=typed,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(stderr: str) -> str:
    """The single line a bad answer prints; fails on a traceback or more lines."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


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
        ["'a10g'", "'azure'", "t4, a10, v100, a100", "pass default_gpu=t4 or another of those"],
    ),
    "unknown-framework": (
        ["framework=jax"],
        ["framework 'jax' is not one of pytorch, tensorflow; pass framework=pytorch"],
    ),
    "unknown-python": (["python_version=3.9"], ["python_version '3.9' is not one of 3.11,"]),
    "unknown-license": (["license=GPL"], ["license 'GPL' is not one of MIT, Apache-2.0"]),
}


@pytest.mark.parametrize(("answers", "expected"), BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
def test_bad_answer_stops_cookiecutter(tmp_path: Path, answers: list[str], expected: list[str]):
    done = cookiecutter(tmp_path, *answers)
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    for text in expected:
        assert text in line, line
    assert list(tmp_path.iterdir()) == [], "cookiecutter left a half-made project"


def test_a_bad_slug_typed_at_the_question_is_asked_again(tmp_path: Path) -> None:
    # Enter keeps a default: the name, then '3d-vision', then the suggested fix, then defaults.
    done = cookiecutter(tmp_path, typed="Vision\n3d-vision\nvision-3d\n" + "\n" * 10)
    assert done.returncode == 0, done.stdout + done.stderr
    shown = done.stdout + done.stderr
    assert shown.count("project_slug '3d-vision' must start with a letter; answer vision-3d") == 1
    assert "Traceback" not in shown
    assert [p.name for p in tmp_path.iterdir()] == ["vision-3d"]
    assert (tmp_path / "vision-3d" / "src" / "vision_3d").is_dir()  # derived from the fixed slug


def test_a_gpu_the_cloud_lacks_is_asked_again_among_its_gpus(tmp_path: Path) -> None:
    # Defaults up to the cloud; then azure, a10g, then the fourth of azure's GPUs in the menu.
    done = cookiecutter(tmp_path, typed="\n" * 8 + "azure\na10g\n4\n" + "\n" * 4)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "default_gpu 'a10g' is not offered by default_cloud 'azure'" in done.stderr
    answers = json.loads((tmp_path / "cloud-gpu-project" / ".cruft.json").read_text())
    chosen = answers["context"]["cookiecutter"]
    assert (chosen["default_cloud"], chosen["default_gpu"]) == ("azure", "a100")


def test_no_rendered_hook_is_left_in_the_temporary_folder(tmp_path: Path) -> None:
    """Cookiecutter renders each hook into the temporary folder and leaves it there; the hooks
    take their own copies away, after a project and after a refused answer alike."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    made = cookiecutter(tmp_path / "made", env={"TMPDIR": str(temporary)})
    assert made.returncode == 0, made.stderr
    refused = cookiecutter(tmp_path / "refused", "project_slug=My-Project",
                           env={"TMPDIR": str(temporary)})  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert sorted(path.name for path in temporary.iterdir()) == []


def test_generation_ends_with_the_next_commands(tmp_path: Path) -> None:
    done = cookiecutter(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "Made cloud-gpu-project/. Next:"
    steps = [line.split("#")[0].strip() for line in lines[1:]]
    assert steps[0] == f"cd {tmp_path / 'cloud-gpu-project'}"  # tmp_path is outside this folder
    assert steps[1].startswith("git init")  # tmp_path is no git repository
    assert steps[-2:] == ["pip install invoke && invoke setup", "invoke train"]
    git(tmp_path, "init", "-q")
    inside = cookiecutter(tmp_path / "in-repo")
    assert inside.returncode == 0, inside.stderr
    assert "git init" not in inside.stdout


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


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ('{"package_name": "typing"}', "package_name 'typing' is a standard-library module"),
        ('{"framework": "jax"}', "framework 'jax' is not one of pytorch, tensorflow"),
    ],
)
def test_bad_answer_stops_cruft_create(
    tmp_path: Path, template_repo: TemplateRepo, given: str, expected: str
) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "cruft", "create", str(template_repo.path), "--no-input"),
            *("--output-dir", str(tmp_path), "--extra-context", given),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    assert expected in line
    assert line.count("pass --extra-context '{") == 1, line  # the fix in cruft's syntax
    assert list(tmp_path.iterdir()) == []
