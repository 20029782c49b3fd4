"""Project tasks: `invoke --list`, `invoke <task> --help`.

Hydra overrides go after `--`: `invoke train -- model=cnn trainer.max_epochs=5`.
Tasks import only the standard library, so `invoke --list` stays instant; the heavy imports
happen in the processes they start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import shutil
{%- if cookiecutter.framework == "pytorch" %}
import socket
{%- endif %}
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from invoke import Context, Exit, task

PACKAGE = "{{ cookiecutter.package_name }}"
PYTHON = shlex.quote(sys.executable)
{%- if cookiecutter.framework == "pytorch" %}
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
{%- endif %}
# The images: `invoke build`, `push`, `run`, `shell`; Dockerfile and requirements/ hold the rest.
IMAGE = "{{ cookiecutter.project_slug }}"
DOCKER = os.environ.get("DOCKER", "docker")  # another client: DOCKER=podman, or a path
FLAVOURS = ("gpu", "cpu")  # each has its lock, requirements/<flavour>.txt
IMAGE_UID = 1000  # the image's user (Dockerfile)
CONTAINER_OUTPUTS = "/workspace/outputs"  # PROJECT_ROOT=/workspace in the image
# The image is Linux x86_64 with the project's Python; the locks are made for that.
LOCK_PYTHON = "{{ cookiecutter.python_version }}"
LOCK_PLATFORM = "x86_64-manylinux_2_28"


def _overrides(c: Context) -> str:
    """Hydra overrides given after `--`."""
    return c.remainder.strip()


def _module(module: str, c: Context, extra: str = "") -> str:
    return f"{PYTHON} -m {PACKAGE}.{module} {extra} {_overrides(c)}".strip()


{% if cookiecutter.framework == "tensorflow" -%}
@task(help={"cpu": "install the CPU build of TensorFlow (default: only when no NVIDIA GPU)"})
def setup(c: Context, cpu: bool | None = None) -> None:
    """Install the project and its dev tools into this Python environment."""
    if cpu is None:
        cpu = shutil.which("nvidia-smi") is None
    extras = "dev" if cpu else "gpu,tools"  # dev is the CPU build and the tools
    c.run(f"{PYTHON} -m pip install -e '.[{extras}]'", pty=False)


@task(
    help={
        "gpus": "GPUs for MirroredStrategy in this one process (without a GPU: logical CPU "
        "devices); 1 trains on one device",
    }
)
def train(c: Context, gpus: int = 1) -> None:
    """Train locally: invoke train [--gpus N] [-- hydra overrides]."""
    if gpus < 1:
        raise Exit(f"--gpus must be at least 1, got {gpus}", code=2)
    env = {"NUM_REPLICAS": str(gpus)} if gpus > 1 else {}
    c.run(_module("train", c), env=env, pty=sys.stdout.isatty())
{%- else -%}
@task(help={"cpu": "install the CPU build of PyTorch (default: only when no NVIDIA GPU)"})
def setup(c: Context, cpu: bool | None = None) -> None:
    """Install the project and its dev tools into this Python environment."""
    if cpu is None:
        cpu = shutil.which("nvidia-smi") is None
    index = f"--extra-index-url {CPU_TORCH_INDEX}" if cpu and _resolves(CPU_TORCH_INDEX) else ""
    c.run(f"{PYTHON} -m pip install {index} -e '.[dev]'", pty=False)


def _resolves(url: str) -> bool:
    """Whether `url`'s host has an address: pip retries an index that has none for minutes."""
    try:
        socket.getaddrinfo(urlsplit(url).hostname, 443)
    except OSError:
        print(f"note: {url} does not resolve; pip uses the indexes it is configured with")
        return False
    return True


@task(
    help={
        "gpus": "GPUs (or CPU processes) for DDP through torchrun; 1 runs a single process",
    }
)
def train(c: Context, gpus: int = 1) -> None:
    """Train locally: invoke train [--gpus N] [-- hydra overrides]."""
    if gpus < 1:
        raise Exit(f"--gpus must be at least 1, got {gpus}", code=2)
    if gpus == 1:
        c.run(_module("train", c), pty=sys.stdout.isatty())
        return
    c.run(
        f"{PYTHON} -m torch.distributed.run --standalone --nproc-per-node={gpus} "
        f"-m {PACKAGE}.train {_overrides(c)}",
        pty=sys.stdout.isatty(),
    )
{%- endif %}


@task(help={"ckpt": "a checkpoint file or a run directory (uses its best checkpoint)"})
def evaluate(c: Context, ckpt: str) -> None:
    """Score a checkpoint on the held-out split: invoke evaluate --ckpt RUN_DIR."""
    c.run(_module("evaluate", c, f"ckpt_path={shlex.quote(ckpt)}"), pty=sys.stdout.isatty())


@task(help={"folds": "number of folds"})
def crossval(c: Context, folds: int = 5) -> None:
    """K-fold cross-validation over train+val: invoke crossval --folds 5."""
    c.run(_module("crossval", c, f"data.folds={folds}"), pty=sys.stdout.isatty())


@task(help={"search": "a config in configs/hparams_search/ (Optuna); omit for a grid"})
def sweep(c: Context, search: str = "") -> None:
    """Hyperparameter sweep: invoke sweep -- optimizer.lr=1e-3,3e-3 (grid), or --search NAME."""
    chosen = f"hparams_search={search}" if search else "--multirun"
    c.run(_module("train", c, chosen), pty=sys.stdout.isatty())


@task
def test(c: Context) -> None:
    """Run the test suite on the CPU."""
    c.run(f"{PYTHON} -m pytest {_overrides(c)}", pty=sys.stdout.isatty())


@task
def lint(c: Context) -> None:
    """Check style and common bugs with ruff."""
    c.run(f"{PYTHON} -m ruff check .")
    c.run(f"{PYTHON} -m ruff format --check .")


@task(name="format")
def format_(c: Context) -> None:
    """Rewrite the code in ruff's style and apply safe fixes."""
    c.run(f"{PYTHON} -m ruff check --fix .")
    c.run(f"{PYTHON} -m ruff format .")


# --- images ---


def _docker_engine(c: Context) -> None:
    """Exit with a clear message unless a Docker engine answers."""
    if shutil.which(DOCKER) is None:
        raise Exit(f"{DOCKER} not found: install Docker, or set DOCKER to another client", code=1)
    if c.run(f"{shlex.quote(DOCKER)} info", hide=True, warn=True).failed:
        raise Exit(
            f"no Docker engine answers (`{DOCKER} info` failed): start Docker, "
            "or point DOCKER_HOST at a running engine",
            code=1,
        )


def _git(c: Context, args: str) -> str:
    done = c.run(f"git {args}", hide=True, warn=True)
    return done.stdout.strip() if done.ok else ""


def _revision(c: Context) -> str:
    """The commit the image is built from, `-dirty` with uncommitted changes; `dev` outside git."""
    commit = _git(c, "rev-parse --short=12 HEAD")
    if not commit:
        return "dev"
    return commit + ("-dirty" if _git(c, "status --porcelain") else "")


def _tag(c: Context, flavour: str) -> str:
    return f"{IMAGE}:{_revision(c)}-{flavour}"


def _flavour(cpu: bool) -> str:
    return "cpu" if cpu else "gpu"


def _source(c: Context) -> str:
    """The repository URL for the image's source label, any credentials in it left out."""
    url = urlsplit(_git(c, "remote get-url origin"))
    if not url.scheme:  # empty, or scp-like (git@host:path), which holds no secret
        return url.path
    return urlunsplit(url._replace(netloc=url.netloc.rpartition("@")[2]))


def _docker_run(c: Context, command: list[str], what: str, **kwargs: object) -> None:
    """Run a docker command; when it fails, exit 1 saying that `what` failed."""
    done = c.run(shlex.join(command), warn=True, **kwargs)
    if done.failed:
        raise Exit(f"{what} failed (exit {done.exited}); the output above says why", code=1)


@task(
    help={
        "cpu": "build the CPU image (requirements/cpu.txt) instead of the GPU image",
        "base_image": "the image to build on (default: the Dockerfile's digest-pinned CUDA base)",
        "python": "the base's Python, e.g. python3.11 (default: the Dockerfile's)",
{%- if cookiecutter.framework == "pytorch" %}
        "find_links": "a URL of wheels pip reads as well (a mirror, a wheelhouse); for the CPU "
        "image it replaces PyTorch's CPU index",
{%- else %}
        "find_links": "a URL of wheels pip reads as well (a mirror, a wheelhouse)",
{%- endif %}
        "no_cache": "rebuild every layer",
    }
)
def build(
    c: Context,
    cpu: bool = False,
    base_image: str = "",
    python: str = "",
    find_links: str = "",
    no_cache: bool = False,
) -> None:
    """Build the training image, tagged with the git revision: invoke build [--cpu]."""
    _docker_engine(c)
    flavour = _flavour(cpu)
    meta = tomllib.loads(Path("pyproject.toml").read_text(encoding="utf-8"))["project"]
    args = {
        "LOCK": f"requirements/{flavour}.txt",
        "REVISION": _git(c, "rev-parse HEAD"),
        "VERSION": meta["version"],
        "SOURCE": _source(c),
        "BASE_IMAGE": base_image,
        "PYTHON": python,
        "FIND_LINKS": find_links,
{%- if cookiecutter.framework == "pytorch" %}
        # PyPI's Linux torch is the CUDA build: the CPU lock's torch comes from PyTorch's index.
        "EXTRA_INDEX_URL": CPU_TORCH_INDEX if cpu and not find_links else "",
{%- endif %}
    }
    tags = [_tag(c, flavour), f"{IMAGE}:{flavour}"]
    command = [DOCKER, "build", *(f"--build-arg={k}={v}" for k, v in args.items() if v)]
    command += [f"--tag={tag}" for tag in tags] + (["--no-cache"] if no_cache else []) + ["."]
    # BuildKit (the default since Docker 23) runs the Dockerfile's cache mounts.
    _docker_run(c, command, "docker build", env={"DOCKER_BUILDKIT": "1"}, pty=sys.stdout.isatty())
    print(f"built {tags[0]} (also {tags[1]})")


@task(
    help={
        "registry": "where to push: a registry and namespace, e.g. ghcr.io/you or localhost:5000",
        "cpu": "push the CPU image instead of the GPU image",
    }
)
def push(c: Context, registry: str, cpu: bool = False) -> None:
    """Push this revision's image to a registry, print its digest: invoke push --registry REF."""
    _docker_engine(c)
    local = _tag(c, _flavour(cpu))
    if c.run(shlex.join([DOCKER, "image", "inspect", local]), hide=True, warn=True).failed:
        raise Exit(f"no image {local}: run `invoke build{' --cpu' if cpu else ''}` first", code=1)
    remote = f"{registry.rstrip('/')}/{local}"
    _docker_run(c, [DOCKER, "tag", local, remote], "docker tag")
    _docker_run(c, [DOCKER, "push", remote], "docker push")
    inspected = c.run(shlex.join([DOCKER, "image", "inspect", remote]), hide=True)
    repository = remote.rsplit(":", 1)[0]
    digests = json.loads(inspected.stdout)[0]["RepoDigests"]
    pushed = next(d for d in digests if d.startswith(f"{repository}@"))
    print(f"pushed {remote}\ndigest {pushed}")


def _container_args(c: Context, cpu: bool, image: str, outputs: str) -> list[str]:
    """`docker run` options shared by run and shell: GPUs, outputs mount, user, .env; the image."""
    gpu = not cpu and shutil.which("nvidia-smi") is not None
    folder = Path(outputs).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    args = ["--rm", f"--volume={folder}:{CONTAINER_OUTPUTS}"]
    if gpu:
        args.append("--gpus=all")
    if hasattr(os, "getuid") and os.getuid() != 0:
        # Write the outputs as you, so they are yours on this machine.
        args += [f"--user={os.getuid()}:{os.getgid()}", "--env=HOME=/tmp"]
    elif hasattr(os, "getuid") and folder.stat().st_uid == 0:
        os.chown(folder, IMAGE_UID, IMAGE_UID)  # root here: let the image's user write there
    if Path(".env").is_file():
        args.append("--env-file=.env")  # secrets reach the container at run time, never the image
    return [*args, image or f"{IMAGE}:{_flavour(not gpu)}"]


@task(
    help={
        "cpu": "run the CPU image (default: the GPU image with --gpus=all when nvidia-smi is here)",
        "image": "the image to run (default: the last `invoke build` of that flavour)",
        "outputs": "the folder mounted as the runs' outputs (default: outputs)",
    }
)
def run(c: Context, cpu: bool = False, image: str = "", outputs: str = "outputs") -> None:
    """Train inside the image on this machine: invoke run [--cpu] [-- hydra overrides]."""
    _docker_engine(c)
    command = [DOCKER, "run", *_container_args(c, cpu, image, outputs)]
    command += shlex.split(_overrides(c))
    _docker_run(c, command, "docker run", pty=sys.stdout.isatty())


@task(
    help={
        "cpu": "open the CPU image (default: the GPU image when nvidia-smi is here)",
        "image": "the image to open (default: the last `invoke build` of that flavour)",
        "outputs": "the folder mounted as the runs' outputs (default: outputs)",
    }
)
def shell(c: Context, cpu: bool = False, image: str = "", outputs: str = "outputs") -> None:
    """Open a bash shell in the image, outputs mounted as for `invoke run`."""
    _docker_engine(c)
    args = _container_args(c, cpu, image, outputs)
    command = [DOCKER, "run", "--interactive", "--tty", "--entrypoint=bash", *args]
    _docker_run(c, command, "docker run", pty=True)


def _uv() -> list[str]:
    if importlib.util.find_spec("uv"):
        return [sys.executable, "-m", "uv"]
    if shutil.which("uv"):
        return ["uv"]
    raise Exit("uv not found: pip install uv", code=1)


@task(
    help={
{%- if cookiecutter.framework == "pytorch" %}
        "find_links": "a folder or URL of wheels for the CPU lock, read instead of PyTorch's CPU "
        "index (offline, or behind a mirror)",
{%- else %}
        "find_links": "a folder or URL of wheels uv reads as well (a mirror, a wheelhouse)",
{%- endif %}
        "upgrade": "move every package to its newest version, not only what changed",
    }
)
def lock(c: Context, find_links: str = "", upgrade: bool = False) -> None:
    """Regenerate the image locks requirements/gpu.txt and cpu.txt from pyproject.toml."""
    common = [
        *_uv(),
        *("pip", "compile", "--quiet", "--native-tls", "--generate-hashes", "--no-annotate"),
        *("--python-version", LOCK_PYTHON, "--python-platform", LOCK_PLATFORM),
        *("--custom-compile-command", "invoke lock"),
        *(["--upgrade"] if upgrade else []),
{%- if cookiecutter.framework == "tensorflow" %}
        *(["--find-links", find_links] if find_links else []),
{%- endif %}
        *("pyproject.toml", "requirements/image.in"),
    ]
    flavours = {
{%- if cookiecutter.framework == "pytorch" %}
        "gpu": ["--constraint", "requirements/cuda.txt"],
        # PyPI's Linux torch is the CUDA build. The CPU build (torch==X+cpu) comes from PyTorch's
        # index or from --find-links, and wins over PyPI's only with the best-match strategy.
        "cpu": ["--index-strategy", "unsafe-best-match"]
        + (["--find-links", find_links] if find_links else ["--extra-index-url", CPU_TORCH_INDEX]),
{%- else %}
        "gpu": ["--extra", "gpu", "--constraint", "requirements/cuda.txt"],
        "cpu": ["--extra", "cpu"],
{%- endif %}
    }
    for flavour in FLAVOURS:
        output = ["--output-file", f"requirements/{flavour}.txt"]
        c.run(shlex.join([*common, *flavours[flavour], *output]))
        print(f"locked requirements/{flavour}.txt")
