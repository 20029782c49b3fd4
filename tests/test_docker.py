"""The generated project's image on a real Docker engine, built with its own `invoke build`.

Each framework's CPU image is built once per session, from the stand-in base (NVIDIA's CUDA
bases cannot be pulled here), and shared by the tests: it trains, runs as a non-root user,
checkpoints on `docker stop` and resumes, keeps secrets out, rebuilds only the code after a code
change, goes to a registry and back by digest, and builds again to the same layer contents.
Without an engine the module is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import TEMPLATE_DIR, commit_all, git
from helpers import commands, engine

from template_tools import bake, frameworks

CLIENT = engine.docker_client() or ""
pytestmark = pytest.mark.skipif(
    not CLIENT, reason="no Docker engine answers a client that can build with BuildKit"
)
FRAMEWORKS = ["pytorch", "tensorflow"]
# The stand-in has Debian's Python 3.11; the CPU locks are made for the first Python choice.
ANSWERS = {"project_name": "Docker Test Project", "python_version": "3.11", "tracking": "wandb"}
IMAGE_NAME = "docker-test-project"  # its slug: every image of that name is the tests' own
CONTAINER_OUTPUTS = "/workspace/outputs"
IMAGE_UID = 1000
BUILD_TIMEOUT = 1200
# Stand for what a user keeps in .env and in the shell that runs the build.
ENV_FILE_SECRET = "dotenv-secret-6f1c0e2a"
BUILD_ENV_SECRET = "shell-secret-93b7d4c1"
SECRETS = [ENV_FILE_SECRET, BUILD_ENV_SECRET]


def docker(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return engine.run(CLIENT, *args, timeout=timeout)


def invoke(project: Path, *args: str, timeout: int = BUILD_TIMEOUT, **env: str):
    """The project's own invoke task, with this client as DOCKER."""
    return commands.invoke(project, *args, timeout=timeout, DOCKER=CLIENT, **env)


@pytest.fixture(scope="module")
def stand_in() -> Iterator[str]:
    """The stand-in base with one more layer, a file naming this session.

    BuildKit keeps every build's cache records, and Docker 20.10's picks one of several records
    for the same step at random; those of earlier sessions hold the same files with other
    timestamps. A base with layers of its own (a label is not enough: the cache keys of a local
    base come from its layers) gives this session's builds cache keys of their own.
    """
    try:
        cached = engine.build_stand_in(CLIENT)
    except RuntimeError as error:
        pytest.skip(f"no stand-in base image: {error}")
    session = f"{cached.split(':')[0]}:session-{uuid.uuid4().hex[:12]}"
    dockerfile = f"FROM {cached}\nRUN echo {session} > /etc/test-session\n"
    done = engine.run(CLIENT, "build", "--quiet", "--tag", session, "-", input=dockerfile)
    assert done.returncode == 0, done.stderr
    yield session
    docker("image", "rm", session)


@pytest.fixture(scope="module")
def find_links() -> Iterator[str]:
    """Where the CPU build of torch comes from when PyTorch's index is out of reach: the wheel
    folder pip on this machine uses, served over HTTP to the builder for this session only."""
    if engine.resolves(engine.CPU_TORCH_INDEX_HOST):
        yield ""
        return
    torch = frameworks()["pytorch"]["version"]
    folder = engine.wheel_folder(f"torch-{torch}+cpu-cp311-*.whl")
    if folder is None:
        pytest.skip(f"{engine.CPU_TORCH_INDEX_HOST} is unreachable and no local torch+cpu wheel")
    with engine.serve_folder(folder, engine.bridge_gateway(CLIENT)) as url:
        yield url


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A project per framework, a git repository with one commit and a secret in its .env."""
    made = {}
    for framework in FRAMEWORKS:
        project = bake(
            TEMPLATE_DIR, tmp_path_factory.mktemp(framework), {**ANSWERS, "framework": framework}
        )
        (project / ".env").write_text(f"DATA_BUCKET_TOKEN={ENV_FILE_SECRET}\n")
        git(project, "init", "-q", "-b", "main")
        commit_all(project, "project")
        made[framework] = project
    return made


def build_args(stand_in: str, find_links: str) -> list[str]:
    links = ["--find-links", find_links] if find_links else []
    return ["build", "--cpu", "--base-image", stand_in, "--python", engine.STAND_IN_PYTHON, *links]


def build(project: Path, stand_in: str, find_links: str, *extra: str) -> float:
    """`invoke build --cpu` on the stand-in, a secret in its environment; returns the seconds."""
    started = time.perf_counter()
    done = invoke(project, *build_args(stand_in, find_links), *extra, BUILD_SECRET=BUILD_ENV_SECRET)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    return time.perf_counter() - started


@pytest.fixture(scope="module")
def images(projects: dict[str, Path], stand_in: str, find_links: str) -> Iterator[dict[str, str]]:
    """framework -> the CPU image of its project, built once per session (and removed after)."""
    built = {}
    for framework, project in projects.items():
        seconds = build(project, stand_in, find_links)  # cold: the session's base is new
        revision = git(project, "rev-parse", "--short=12", "HEAD")
        built[framework] = f"{project.name}:{revision}-cpu"
        print(f"{framework}: cold build {seconds:.0f} s")
    yield built
    listed = docker("image", "ls", "--quiet", f"--filter=reference={IMAGE_NAME}",
                    f"--filter=reference=*/{IMAGE_NAME}")  # fmt: skip
    docker("image", "rm", "--force", *set(listed.stdout.split()))


def outputs_dir(tmp_path: Path) -> Path:
    """A host folder the image's user may write to, as `invoke run` makes it."""
    folder = tmp_path / "outputs"
    folder.mkdir()
    os.chown(folder, IMAGE_UID, IMAGE_UID)
    return folder


def run_dirs(outputs: Path) -> list[Path]:
    return sorted(path.parent for path in outputs.rglob("metrics.json"))


# --- every framework ---


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_invoke_run_trains_and_writes_metrics_into_the_mount(
    framework: str, projects: dict[str, Path], images: dict[str, str], tmp_path: Path
) -> None:
    outputs = tmp_path / "outputs"
    options = ["--cpu", "--image", images[framework], "--outputs", str(outputs)]
    done = invoke(projects[framework], "run", *options, "--", "trainer.max_epochs=2", timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    [run_dir] = run_dirs(outputs)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["epochs"] == 2
    assert 0 <= metrics["test/accuracy"] <= 1
    assert (run_dir / "checkpoints" / "last.pt").exists() or any(run_dir.glob("checkpoints/*"))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_process_runs_as_a_non_root_user(framework: str, images: dict[str, str]) -> None:
    config = json.loads(docker("image", "inspect", images[framework]).stdout)[0]["Config"]
    assert config["User"] == f"{IMAGE_UID}:{IMAGE_UID}"
    ids = docker("run", "--rm", "--entrypoint", "id", images[framework])
    assert ids.returncode == 0, ids.stderr
    assert ids.stdout.startswith(f"uid={IMAGE_UID}(trainer) gid={IMAGE_UID}(trainer)")
    # PID 1 is the init process, the trainer its child.
    assert config["Entrypoint"][:2] == ["dumb-init", "--"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_docker_stop_checkpoints_and_a_second_run_resumes(
    framework: str, images: dict[str, str], tmp_path: Path
) -> None:
    outputs = outputs_dir(tmp_path)
    name = f"resume-{framework}-{os.getpid()}"
    run_dir = f"{CONTAINER_OUTPUTS}/run"
    overrides = [f"hydra.run.dir={run_dir}", "trainer.max_epochs=40", "logger=jsonl",
                 "callbacks.early_stopping=null"]  # fmt: skip
    mount = f"--volume={outputs}:{CONTAINER_OUTPUTS}"
    started = docker("run", "--detach", f"--name={name}", mount, images[framework], *overrides)
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 300
        while "epoch 2/40" not in docker("logs", name).stderr + docker("logs", name).stdout:
            assert time.monotonic() < deadline, docker("logs", name).stderr[-3000:]
            time.sleep(0.2)
        assert docker("stop", "--time=60", name).returncode == 0
        state = json.loads(docker("inspect", name).stdout)[0]["State"]
        logs = docker("logs", name)
    finally:
        docker("rm", "--force", name)
    assert state["ExitCode"] == 143, logs.stdout[-3000:] + logs.stderr[-3000:]
    assert list((outputs / "run" / "checkpoints").iterdir())
    assert not (outputs / "run" / "metrics.json").exists()

    second = docker("run", "--rm", mount, images[framework], *overrides)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "resumed from" in second.stdout + second.stderr
    assert json.loads((outputs / "run" / "metrics.json").read_text())["epochs"] == 40


# --- the PyTorch image: secrets, rebuilds, registry, reproducibility ---


def test_no_secret_in_any_layer_or_the_history(
    images: dict[str, str], find_links: str, tmp_path: Path
) -> None:
    image = images["pytorch"]
    # The build machine's address (of the wheel server) stays out too.
    needles = [*SECRETS, *([find_links.split("/")[2]] if find_links else [])]
    saved = engine.saved_image(CLIENT, image, tmp_path / "saved")
    assert engine.files_holding(saved, [needle.encode() for needle in needles]) == []
    history = docker("history", "--no-trunc", image).stdout
    config = docker("image", "inspect", image).stdout
    assert [needle for needle in needles if needle in history + config] == []


def test_a_code_change_rebuilds_only_the_code_layer(
    projects: dict[str, Path], images: dict[str, str], stand_in: str, find_links: str
) -> None:
    project = projects["pytorch"]
    before = engine.layer_digests(CLIENT, images["pytorch"])
    train = next((project / "src").glob("*/train.py"))
    original = train.read_text()
    train.write_text(original + "# one more line\n")
    try:
        seconds = build(project, stand_in, find_links)
    finally:
        train.write_text(original)
    revision = git(project, "rev-parse", "--short=12", "HEAD")
    after = engine.layer_digests(CLIENT, f"{project.name}:{revision}-dirty-cpu")
    print(f"pytorch: rebuild after a one-line change {seconds:.1f} s")
    # Layers: base, user, virtualenv, configs, code (and the empty ones of WORKDIR).
    assert len(after) == len(before)
    changed = [index for index, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
    assert len(changed) == 1, "the code's layer is rebuilt, every other layer reused"
    code_layer = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", images["pytorch"])
    assert "COPY src src" in code_layer.stdout


def test_push_to_a_registry_and_pull_back_by_digest(
    projects: dict[str, Path], images: dict[str, str], tmp_path: Path
) -> None:
    if not shutil.which("docker-registry"):
        pytest.skip("docker-registry is not installed (apt-get install docker-registry)")
    project, image = projects["pytorch"], images["pytorch"]
    image_id = docker("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    with engine.local_registry(tmp_path) as registry:
        pushed = invoke(project, "push", "--cpu", "--registry", registry, timeout=900)
        assert pushed.returncode == 0, pushed.stdout[-3000:] + pushed.stderr[-3000:]
        reference = pushed.stdout.split("digest ")[-1].strip()
        assert reference.startswith(f"{registry}/{project.name}@sha256:")
        # Gone from this engine under every name, then back from the registry by digest alone.
        assert docker("image", "rm", "--force", image_id).returncode == 0
        assert not engine.image_exists(CLIENT, image)
        pulled = docker("pull", reference, timeout=900)
        assert pulled.returncode == 0, pulled.stderr
    assert docker("image", "inspect", "--format", "{{.Id}}", reference).stdout.strip() == image_id
    docker("tag", reference, image)


def test_two_clean_builds_have_the_same_layer_contents(
    projects: dict[str, Path],
    images: dict[str, str],
    stand_in: str,
    find_links: str,
    tmp_path: Path,
) -> None:
    """Same files, bytes, modes and owners in every layer; the digests are compared only where
    the builder rewrites timestamps (SOURCE_DATE_EPOCH), which BuildKit of Docker 20.10 cannot."""
    project = projects["pytorch"]
    first_id = docker("image", "inspect", "--format", "{{.Id}}", images["pytorch"]).stdout.strip()
    first = engine.saved_image(CLIENT, images["pytorch"], tmp_path / "first")
    seconds = build(project, stand_in, find_links, "--no-cache")  # the same tag, a new image
    docker("image", "rm", first_id)  # untagged by the build
    print(f"pytorch: second clean build {seconds:.0f} s")
    second = engine.saved_image(CLIENT, images["pytorch"], tmp_path / "second")
    layers = [engine.saved_layers(folder) for folder in (first, second)]
    assert len(layers[0]) == len(layers[1])
    differing = [
        index
        for index, (a, b) in enumerate(zip(*layers, strict=True))
        if engine.layer_contents(a) != engine.layer_contents(b)
    ]
    assert differing == []
