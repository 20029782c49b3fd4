"""What the tasks do differently for each framework (cloudgpu.tasks.frameworks), and how they
learn a project's: its pyproject.toml's [tool.cloudgpu] table, or one line that says what is
wrong with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cloudgpu.tasks.frameworks import pytorch, tensorflow

import cloudgpu

SETTINGS = """[tool.cloudgpu]
package = "demo"
image = "demo"
framework = "{framework}"
python = "3.11"
default-cloud = "gcp"
default-gpu = "t4"
logger = "wandb"
logger-keys = {{ wandb = ["WANDB_API_KEY"] }}
"""


def read_project(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    """`code` run after importing the tasks' view of the project in `folder`."""
    source = str(Path(cloudgpu.__file__).resolve().parents[1])  # this checkout's, not an install
    env = {**os.environ, "CLOUDGPU_PROJECT": str(folder), "PYTHONPATH": source}
    return subprocess.run(
        [sys.executable, "-c", f"from cloudgpu.tasks import project; {code}"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["pytorch", "tensorflow"])
def test_a_project_names_its_framework_and_its_defaults(tmp_path: Path, name: str) -> None:
    (tmp_path / "pyproject.toml").write_text(SETTINGS.format(framework=name))
    code = "print(project.framework.__name__, project.DEFAULT_GPU, project.LOGGER_KEYS)"
    done = read_project(tmp_path, code)
    assert done.returncode == 0, done.stderr
    keys = {"wandb": ("WANDB_API_KEY",)}
    assert done.stdout.split(" ", 2) == [f"cloudgpu.tasks.frameworks.{name}", "t4", f"{keys}\n"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[project]\nname = 'demo'\n", "has no readable [tool.cloudgpu] table"),
        (
            SETTINGS.format(framework="pytorch").replace('default-gpu = "t4"\n', ""),
            "[tool.cloudgpu] lacks default-gpu",
        ),
        (SETTINGS.format(framework="jax"), "framework = 'jax': pytorch, tensorflow"),
    ],
)
def test_a_wrong_table_stops_in_one_line(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text)
    done = read_project(tmp_path, "print('read')")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert str(tmp_path / "pyproject.toml") in done.stderr


def test_pytorch_setup_adds_the_cpu_index_only_where_it_resolves(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An index whose host has no address would make pip retry it for minutes."""
    commands = {}
    for index in ("https://localhost/whl/cpu", "https://pytorch.invalid/whl/cpu"):
        monkeypatch.setattr(pytorch, "CPU_INDEX", index)
        commands[index] = pytorch.setup_command("python", cpu=True)
    resolves, unresolved = commands.values()
    assert (
        resolves == "python -m pip install --extra-index-url https://localhost/whl/cpu -e '.[dev]'"
    )
    assert "--extra-index-url" not in unresolved
    assert "https://pytorch.invalid/whl/cpu does not resolve" in capsys.readouterr().out
    assert pytorch.setup_command("python", cpu=False) == "python -m pip install -e '.[dev]'"


def test_tensorflow_setup_takes_the_cpu_or_the_gpu_distribution() -> None:
    assert tensorflow.setup_command("python", cpu=True) == "python -m pip install -e '.[dev]'"
    assert tensorflow.setup_command("py", cpu=False) == "py -m pip install -e '.[gpu,tools]'"


def test_the_cpu_image_takes_torch_from_the_cpu_index_or_the_wheelhouse() -> None:
    assert pytorch.image_build_args(cpu=True, find_links="") == {
        "EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cpu"
    }
    assert pytorch.image_build_args(cpu=True, find_links="http://wheels/") == {
        "EXTRA_INDEX_URL": ""
    }
    assert pytorch.image_build_args(cpu=False, find_links="") == {"EXTRA_INDEX_URL": ""}
    assert tensorflow.image_build_args(cpu=True, find_links="") == {}


@pytest.mark.parametrize("module", [pytorch, tensorflow])
def test_each_framework_launches_one_process_for_one_device(module: object) -> None:
    command, env = module.train_command("python", "demo", 1, "seed=1")  # type: ignore[attr-defined]
    assert (command, env) == ("python -m demo.train seed=1", {})
    assert module.container_command("demo", 1, ["seed=1"])[-3:] == ["-m", "demo.train", "seed=1"]  # type: ignore[attr-defined]
