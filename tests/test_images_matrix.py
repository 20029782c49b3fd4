"""images/matrix.json stays honest offline: well formed, consistent with the framework wheels'
CUDA pins, with every lock and with what a baked project's image is built on."""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TEMPLATE_DIR

from images.check_cuda import same_release
from images.tasks import build_command
from template_tools import choices, frameworks
from template_tools.images import (
    CUDA_TAG,
    DIGEST,
    PYTHON_STAGE,
    base_reference,
    cuda_of_tag,
    default_base,
    matrix,
    offered_row,
)
from template_tools.matrix_refresh import cuda_requirements, refresh_row, stack_of

FACTS = ("cuda", "cudnn", "cuda_wheels", "base_image", "digest", "ubuntu_python", "min_driver")
PROJECT_LOCKS = TEMPLATE_DIR / "{{cookiecutter.project_slug}}" / "_locks"
PIN = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)", re.MULTILINE)
ROWS = matrix()


def pins(lock: Path) -> dict[str, str]:
    """name -> version of every requirement in a lock file."""
    return dict(PIN.findall(lock.read_text(encoding="utf-8")))


def wheel_pins(row: dict) -> dict[str, str]:
    return dict(line.split("==") for line in row["cuda_wheels"])


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_row_is_well_formed(row: dict) -> None:
    tag = CUDA_TAG.match(row["base_image"])
    assert tag, row["base_image"]
    assert tag["flavour"] == "base", "the wheels carry CUDA: the base adds none of its own"
    assert tag["ubuntu"] == row["ubuntu"]
    if row["digest"] is None:
        assert row["digest_missing"].strip(), "a row without a digest says why"
    else:
        assert DIGEST.match(row["digest"]), row["digest"]
        assert "digest_missing" not in row
    assert row["id"] == f"{row['package']}-{row['version']}-cu{row['cuda'].replace('.', '')}"
    assert re.fullmatch(r"\d{3}(\.\d+)*", row["min_driver"])
    published = row.get("python_base")  # recorded once the template's CI has pushed it
    if published is not None:
        assert published["image"].endswith(f":{row['base_image'].split(':')[1]}-py3.11")
        assert DIGEST.match(published["digest"]) and published["date"], published
    for fact in FACTS:
        source = row["sources"][fact]
        assert source["source"].strip(), fact
        assert datetime.date.fromisoformat(source["date"]) <= datetime.date.today(), fact


def test_row_ids_are_unique() -> None:
    ids = [row["id"] for row in ROWS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_base_cuda_is_the_frameworks(row: dict) -> None:
    """The base image's CUDA major.minor, the row's and its wheels' are one and the same."""
    assert cuda_of_tag(row["base_image"]) == row["cuda"]
    stack = stack_of(wheel_pins(row))
    assert (stack["cuda"], stack["cudnn"]) == (row["cuda"], row["cudnn"])


def test_every_offered_framework_release_has_a_row() -> None:
    for framework in choices()["framework"]:
        row = offered_row(framework)
        assert row["version"] == frameworks()[framework]["version"]


def test_a_cuda_12_line_for_older_drivers() -> None:
    torch_rows = [row for row in ROWS if row["framework"] == "pytorch"]
    assert {row["cuda"].split(".")[0] for row in torch_rows} >= {"12", "13"}
    oldest = min(torch_rows, key=lambda row: version_key(row["min_driver"]))
    assert version_key(oldest["min_driver"]) < (580,)


@pytest.mark.parametrize("lock", sorted(PROJECT_LOCKS.glob("*/requirements/*.txt")), ids=str)
def test_every_lock_line_is_hashed(lock: Path) -> None:
    requirements = re.findall(r"^\S.*?(?=^\S|\Z)", lock.read_text(), re.MULTILINE | re.DOTALL)
    unhashed = [r.split()[0] for r in requirements if not r.startswith("#") and "--hash" not in r]
    assert unhashed == []


@pytest.mark.parametrize("framework", choices()["framework"])
@pytest.mark.parametrize("tracking", choices()["tracking"])
def test_project_locks_hold_the_matrix_cuda(framework: str, tracking: str) -> None:
    """The GPU lock pins every CUDA wheel of the matrix row; the CPU lock has none."""
    row = offered_row(framework)
    folder = PROJECT_LOCKS / f"{framework}-{tracking}" / "requirements"
    gpu, cpu = pins(folder / "gpu.txt"), pins(folder / "cpu.txt")
    cudnn = {name: version for name, version in gpu.items() if name.startswith("nvidia-cudnn")}
    assert list(cudnn.values()) == [row["cudnn"]]
    for name, version in wheel_pins(row).items():
        assert version_key(gpu[name])[: len(version_key(version))] == version_key(version), name
    # nvidia-ml-py is NVML's pure-Python binding (live GPU metrics), no CUDA library.
    cuda_wheels = [n for n in cpu if n.startswith(("nvidia-", "cuda-")) and n != "nvidia-ml-py"]
    assert cuda_wheels == []


def entries(lock: Path) -> dict[str, str]:
    """name -> its whole entry (the pin and its hashes), comment lines left out."""
    found = re.findall(r"^([a-z0-9][^=\s]*)==(\S.*?)(?=^\S|\Z)", lock.read_text(), re.M | re.S)
    return {name: " ".join(rest.split()) for name, rest in found}


@pytest.mark.parametrize("framework", choices()["framework"])
@pytest.mark.parametrize("tracking", choices()["tracking"])
@pytest.mark.parametrize("flavour", ["gpu", "cpu"])
def test_serving_locks_are_training_locks_less_everything_for_training(
    framework: str, tracking: str, flavour: str
) -> None:
    """The serving image runs the model on the very wheels it was trained with (same versions,
    same hashes) and has nothing of training's: no Hydra, no data formats, no tracker."""
    folder = PROJECT_LOCKS / f"{framework}-{tracking}" / "requirements"
    serving, training = entries(folder / f"serve-{flavour}.txt"), entries(folder / f"{flavour}.txt")
    assert {"numpy", "prometheus-client"} <= serving.keys()
    assert [name for name in serving if serving[name] != training.get(name)] == []
    for_training = {"hydra-core", "omegaconf", "pyarrow", "pillow", "s3fs", "wandb", "dumb-init"}
    assert for_training & serving.keys() == set()
    if flavour == "gpu":
        cudnn = [name for name in serving if name.startswith("nvidia-cudnn")]
        assert cudnn and all(serving[name] == training[name] for name in cudnn)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_base_image_locks_hold_the_matrix_cuda(row: dict) -> None:
    lock = pins(TEMPLATE_DIR / "images" / row["framework"] / f"{row['id']}.txt")
    assert lock[row["package"]] == row["version"]
    assert [v for k, v in lock.items() if k.startswith("nvidia-cudnn")] == [row["cudnn"]]


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_images_build_takes_every_argument_from_the_row(row: dict) -> None:
    command = build_command(row, "3.11")
    args = dict(arg.removeprefix("--build-arg=").split("=", 1) for arg in command if "=" in arg)
    assert args["BASE_IMAGE"] == base_reference(row)
    assert args["CUDA"] == row["cuda"]
    assert args["FRAMEWORK"] == row["framework"]
    context = Path(command[-1])
    dockerfile = Path(next(a.removeprefix("--file=") for a in command if a.startswith("--file=")))
    assert "FROM ${BASE_IMAGE} AS python" in dockerfile.read_text()  # the Python stage, in place
    assert (context / args["LOCK"]).is_file()
    python_base = build_command(row, "3.11", target="python")
    assert "--target=python" in python_base
    assert f"--tag=cloud-gpu-template/python:{row['base_image'].split(':')[1]}-py3.11" in (
        python_base
    )


@pytest.mark.parametrize(
    ("built", "cuda", "same"),
    [
        ("13.0", "13.0", True),  # torch.version.cuda
        ("12.5.1", "12.5", True),  # TensorFlow's build info has the patch release
        ("12.8", "12.5", False),
        ("12.50.1", "12.5", False),
        ("13.0", "13", False),
        (None, "13.0", False),  # a CPU-only build
    ],
)
def test_base_image_build_accepts_only_the_rows_cuda(built: str | None, cuda: str, same: bool):
    assert same_release(built, cuda) is same


def test_baked_image_is_built_on_the_matrix_base(baked: dict[str, Path]) -> None:
    for variant_id, project in baked.items():
        framework = variant_id.split("-")[0]
        row = offered_row(framework)
        dockerfile = (project / "Dockerfile").read_text()
        assert f"\nARG BASE_IMAGE={default_base(row)}\n" in dockerfile, variant_id
        assert PYTHON_STAGE.read_text().strip() in dockerfile, "the Python stage, written once"
        pinned = (project / "requirements" / "cuda.txt").read_text().split("\n")
        assert [line for line in pinned if line and not line.startswith("#")] == row["cuda_wheels"]


# --- refreshing rows (the parsing; the fetching is online) ---

TORCH_REQUIRES = [
    "filelock",
    "cuda-toolkit[cublas,cudart]==13.0.3; platform_system == 'Linux'",
    "cuda-bindings<14,>=13.0.3; platform_system == 'Linux'",
    "nvidia-cudnn-cu13==9.20.0.48; platform_system == 'Linux'",
    "nvidia-nccl-cu13==2.29.7; platform_system == 'Linux'",
    "triton==3.7.1; platform_system == 'Linux'",
    "optree>=0.13.0; extra == 'optree'",
]
TENSORFLOW_REQUIRES = [
    "numpy>=1.26.0",
    'nvidia-cudnn-cu12<10.0,>=9.3.0.75; extra == "and-cuda"',
    'nvidia-cuda-runtime-cu12<13.0,>=12.5.82; extra == "and-cuda"',
    'tensorflow-io-gcs-filesystem>=0.23.1; extra == "gcs-filesystem"',
]


def test_cuda_pins_of_an_exactly_pinned_wheel() -> None:
    found = cuda_requirements(TORCH_REQUIRES)
    assert found == {
        "cuda-toolkit": "13.0.3",
        "nvidia-cudnn-cu13": "9.20.0.48",
        "nvidia-nccl-cu13": "2.29.7",
    }
    assert stack_of(found)["cuda"] == "13.0"


def test_cuda_pins_of_a_cuda_extra_are_its_lower_bounds() -> None:
    found = cuda_requirements(TENSORFLOW_REQUIRES)
    assert found == {"nvidia-cudnn-cu12": "9.3.0.75", "nvidia-cuda-runtime-cu12": "12.5.82"}
    assert stack_of(found) == {
        "cuda": "12.5",
        "cudnn": "9.3.0.75",
        "cuda_wheels": ["nvidia-cuda-runtime-cu12==12.5.82", "nvidia-cudnn-cu12==9.3.0.75"],
    }


def test_refresh_offline_keeps_every_fact_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*_args: object) -> None:
        raise OSError("no network")

    monkeypatch.setattr("template_tools.matrix_refresh.wheel_metadata", offline)
    monkeypatch.setattr("template_tools.matrix_refresh.amd64_digest", offline)
    report: list[str] = []
    for row in ROWS:
        assert refresh_row(row, "2099-01-01", report) == row
    assert len(report) == 2 * len(ROWS)
    assert all("kept" in line for line in report)


def test_refresh_records_a_digest_and_flags_a_cuda_change(monkeypatch: pytest.MonkeyPatch) -> None:
    row = offered_row("tensorflow")
    newer = [line.replace("12.5.82", "12.9.86") for line in TENSORFLOW_REQUIRES]
    monkeypatch.setattr(
        "template_tools.matrix_refresh.wheel_metadata", lambda _r: {"requires_dist": newer}
    )
    monkeypatch.setattr(
        "template_tools.matrix_refresh.amd64_digest", lambda _t: "sha256:" + "a" * 64
    )
    report: list[str] = []
    updated = refresh_row(row, "2099-01-01", report)
    assert updated["digest"] == "sha256:" + "a" * 64 and "digest_missing" not in updated
    assert updated["sources"]["digest"]["date"] == "2099-01-01"
    assert updated["cuda"] == "12.9"
    assert any("choose a matching tag" in line for line in report)
    assert row["cuda"] == "12.5", "the matrix's own row is left alone"


def images_task(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "DOCKER"}
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=TEMPLATE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_images_push_tags_and_pushes_a_row() -> None:
    done = images_task(
        "images.push", "--registry", "reg.example/me", "--row", "torch-2.13.0-cu130", "--dry-run"
    )
    assert done.returncode == 0, done.stderr
    local, remote = "cloud-gpu-template/pytorch:2.13.0-cu130-py3.11", "reg.example/me/pytorch"
    python = "cloud-gpu-template/python:13.0.3-base-ubuntu24.04-py3.11"
    remote_python = "reg.example/me/python:13.0.3-base-ubuntu24.04-py3.11"
    assert done.stdout.splitlines() == [
        f"docker tag {python} {remote_python}",
        f"docker push {remote_python}",
        f"docker tag {local} {remote}:2.13.0-cu130-py3.11",
        f"docker push {remote}:2.13.0-cu130-py3.11",
    ]


def test_a_published_python_base_is_what_projects_build_on() -> None:
    row = {
        **offered_row("pytorch"),
        "python_base": {"image": "ghcr.io/o/python:t", "digest": "sha256:" + "b" * 64},
    }
    assert default_base(row) == "ghcr.io/o/python:t@sha256:" + "b" * 64
    assert default_base(offered_row("pytorch")) == base_reference(offered_row("pytorch"))


def test_an_unknown_row_names_the_known_ones() -> None:
    done = images_task("images.build", "--row", "torch-9.9.9", "--dry-run")
    assert done.returncode == 2
    assert "torch-9.9.9" in done.stderr and "torch-2.13.0-cu130" in done.stderr


def test_the_cuda_check_names_both_releases_when_they_differ(tmp_path: Path) -> None:
    """images/check_cuda.py as the build runs it, against a stand-in torch built for CUDA 13.0."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("class version:\n    cuda = '13.0'\n")
    script = TEMPLATE_DIR / "images" / "check_cuda.py"

    def check(framework: str, cuda: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(tmp_path)}
        command = [sys.executable, str(script), framework, cuda]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)

    assert check("pytorch", "13.0").returncode == 0
    mismatch = check("pytorch", "12.8")
    assert mismatch.returncode == 1
    assert "pytorch is built for CUDA 13.0, the matrix says 12.8" in mismatch.stderr
    unknown = check("jax", "13.0")
    assert unknown.returncode == 1 and "'jax': pytorch or tensorflow" in unknown.stderr
