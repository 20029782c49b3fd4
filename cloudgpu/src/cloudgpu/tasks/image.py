"""The training image: build, push, run and open it, and lock what goes into it.

The Dockerfile and requirements/ hold the rest; see the cloudgpu guide docs/images.md.
"""

from __future__ import annotations

import datetime
import importlib.util
import io
import json
import os
import shlex
import shutil
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from invoke import Context, Exit, task

from cloudgpu import PROVIDERS, in_image, runs, settings
from cloudgpu.commands import CloudError, Commands
from cloudgpu.project import ROOT

from .args import override_args
from .project import IMAGE, PYTHON_VERSION, framework

DOCKER = os.environ.get("DOCKER", "docker")  # another client: DOCKER=podman, or a path
FLAVOURS = ("gpu", "cpu")  # each has its lock, requirements/<flavour>.txt
CONTAINER_OUTPUTS = "/workspace/outputs"  # PROJECT_ROOT=/workspace in the image
# The image is Linux x86_64 with the project's Python; the locks are made for that.
LOCK_PYTHON = PYTHON_VERSION
LOCK_PLATFORM = "x86_64-manylinux_2_28"
PUSHES = runs.RUNS / "pushes.json"  # the last push to each cloud


def _docker_engine(c: Context) -> None:
    """Exit with a clear message unless a Docker engine answers."""
    if shutil.which(DOCKER) is None:
        raise Exit(f"error: {DOCKER} not found: install Docker, or set DOCKER to another "
                   "client", code=1)  # fmt: skip
    if c.run(f"{shlex.quote(DOCKER)} info", hide=True, warn=True).failed:
        raise Exit(f"error: no Docker engine answers (`{DOCKER} info` failed): start Docker, "
                   "or point DOCKER_HOST at a running engine", code=1)  # fmt: skip


def _git(c: Context, args: str) -> str:
    done = c.run(f"git {args}", hide=True, warn=True)
    return done.stdout.strip() if done.ok else ""


def _revision(c: Context) -> str:
    """The commit the image is built from, `-dirty` with uncommitted changes; `dev` outside git."""
    commit = _git(c, "rev-parse --short=12 HEAD")
    if not commit:
        return "dev"
    return commit + ("-dirty" if _git(c, "status --porcelain") else "")


def tag(c: Context, flavour: str) -> str:
    """This revision's local image of a flavour: <project>:<commit>[-dirty]-<flavour>."""
    return f"{IMAGE}:{_revision(c)}-{flavour}"


def flavour(cpu: bool) -> str:
    return "cpu" if cpu else "gpu"


def exists(c: Context, reference: str) -> bool:
    return c.run(shlex.join([DOCKER, "image", "inspect", reference]), hide=True, warn=True).ok


def image_id(c: Context, reference: str) -> str:
    """The image's id (sha256:...): what the engine runs it by, when no registry is in between."""
    done = c.run(shlex.join([DOCKER, "image", "inspect", reference]), hide=True)
    return json.loads(done.stdout)[0]["Id"]


def pushed_digest(c: Context, remote: str) -> str:
    """repository@sha256:... of an image just pushed as `remote` (repository:tag)."""
    inspected = c.run(shlex.join([DOCKER, "image", "inspect", remote]), hide=True)
    repository = remote.rsplit(":", 1)[0]
    digests = json.loads(inspected.stdout)[0]["RepoDigests"]
    return next(d for d in digests if d.startswith(f"{repository}@"))


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
        raise Exit(f"error: {what} failed (exit {done.exited}); the output above says why", code=1)


@task(
    help={
        "cpu": "build the CPU image (requirements/cpu.txt) instead of the GPU image",
        "serve": "build the serving image (requirements/serve-*.txt) that deploy and serve run",
        "base_image": "the image to build on (default: the Dockerfile's digest-pinned CUDA base)",
        "python": "the base's Python, e.g. python3.11 (default: the Dockerfile's)",
        "find_links": framework.FIND_LINKS_BUILD_HELP,
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
    serve: bool = False,
) -> None:
    """Build the training image, tagged with the git revision: invoke build [--cpu] [--serve]."""
    _docker_engine(c)
    kind = ("serve-" if serve else "") + flavour(cpu)  # the tag's flavour and the lock's name
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    in_image.stage_for_build(pyproject, ROOT)  # the pinned release's files, checked in the build
    args = {
        "LOCK": f"requirements/{kind}.txt",
        "REVISION": _git(c, "rev-parse HEAD"),
        "VERSION": tomllib.loads(pyproject)["project"]["version"],
        "SOURCE": _source(c),
        "BASE_IMAGE": base_image,
        "PYTHON": python,
        "FIND_LINKS": find_links,
        **framework.image_build_args(cpu, find_links),
    }
    tags = [tag(c, kind), f"{IMAGE}:{kind}"]
    command = [DOCKER, "build", *(f"--build-arg={k}={v}" for k, v in args.items() if v)]
    command += [f"--tag={tag}" for tag in tags] + (["--no-cache"] if no_cache else [])
    command += ["--target=serve", "."] if serve else ["."]  # the training image is the last stage
    # BuildKit (the default since Docker 23) runs the Dockerfile's cache mounts.
    _docker_run(c, command, "docker build", env={"DOCKER_BUILDKIT": "1"}, pty=sys.stdout.isatty())
    print(f"built {tags[0]} (also {tags[1]})")


@task(
    help={
        "registry": "where to push: a registry and namespace, e.g. ghcr.io/you or localhost:5000",
        "cloud": "push to that cloud's registry instead (ECR, Artifact Registry, ACR; made on "
        "first use) and record the digest for `invoke train --cloud`: aws, gcp, azure or local",
        "cpu": "push the CPU image instead of the GPU image",
        "dry_run": "print the commands instead of running them",
    }
)
def push(
    c: Context, registry: str = "", cloud: str = "", cpu: bool = False, dry_run: bool = False
) -> None:
    """Push this revision's image, print its digest: invoke push --cloud=aws | --registry REF."""
    if bool(registry) == bool(cloud):
        raise Exit("error: invoke push needs --cloud NAME or --registry REF (one of them)", code=2)
    _docker_engine(c)
    if cloud:
        try:
            reference = push_to(c, cloud, cpu, Commands(dry_run=dry_run))
        except CloudError as error:
            raise Exit(f"error: {error}", code=1) from None
        print(f"digest {reference}")
        return
    local = tag(c, flavour(cpu))
    if not exists(c, local):
        raise Exit(
            f"error: no image {local}: run `invoke build{' --cpu' if cpu else ''}` first", code=1
        )
    remote = f"{registry.rstrip('/')}/{local}"
    _docker_run(c, [DOCKER, "tag", local, remote], "docker tag")
    _docker_run(c, [DOCKER, "push", remote], "docker push")
    print(f"pushed {remote}\ndigest {pushed_digest(c, remote)}")


def _container_args(c: Context, cpu: bool, image: str, outputs: str) -> list[str]:
    """`docker run` options shared by run and shell: GPUs, outputs mount, user, .env; the image."""
    gpu = not cpu and shutil.which("nvidia-smi") is not None
    folder = Path(outputs).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    # Docker gives a container 64 MB of /dev/shm; the data loader's workers pass batches there.
    args = ["--rm", "--shm-size=8g", f"--volume={folder}:{CONTAINER_OUTPUTS}"]
    if gpu:
        args.append("--gpus=all")
    if hasattr(os, "getuid"):
        # Write the outputs as you (root too, whose earlier runs' folders the image's user could
        # not write into), so they are yours on this machine.
        args += [f"--user={os.getuid()}:{os.getgid()}", "--env=HOME=/tmp"]
    if Path(".env").is_file():
        args.append("--env-file=.env")  # secrets reach the container at run time, never the image
    return [*args, image or f"{IMAGE}:{flavour(not gpu)}"]


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
    command += override_args(c)
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
    raise Exit("error: uv not found: pip install uv", code=1)


@task(
    help={
        "find_links": framework.FIND_LINKS_LOCK_HELP,
        "upgrade": "move every package to its newest version, not only what changed",
    }
)
def lock(c: Context, find_links: str = "", upgrade: bool = False) -> None:
    """Regenerate the training and serving images' locks from pyproject.toml.

    requirements/gpu.txt and cpu.txt, and the serving image's serve-gpu.txt and serve-cpu.txt."""
    compile_ = [
        *_uv(),
        *("pip", "compile", "--quiet", "--native-tls", "--generate-hashes", "--no-annotate"),
        *("--python-version", LOCK_PYTHON, "--python-platform", LOCK_PLATFORM),
        *("--custom-compile-command", "invoke lock"),
        *(["--upgrade"] if upgrade else []),
    ]
    # The bucket backends: a cloud run reads data=shards and mirrors checkpoints through them.
    training = ["pyproject.toml", "requirements/image.in", "--extra", "buckets"]
    for kind in FLAVOURS:
        output = ["--output-file", f"requirements/{kind}.txt"]
        c.run(shlex.join([*compile_, *training, *framework.lock_args(kind, find_links), *output]))
        print(f"locked requirements/{kind}.txt")
        # The serving image's: serve.in and the framework (from stdin), at training's versions.
        requirement, args = framework.serve_lock_args(kind, find_links)
        serving = ["requirements/serve.in", "-", "--constraint", f"requirements/{kind}.txt"]
        output = ["--output-file", f"requirements/serve-{kind}.txt"]
        command = shlex.join([*compile_, *serving, *args, *output])
        c.run(command, in_stream=io.StringIO(requirement))
        print(f"locked requirements/serve-{kind}.txt")


def push_to(c: Context, cloud: str, cpu: bool, cmd: Commands, serve: bool = False) -> str:
    """Push this revision's image (the serving image with `serve`) to `cloud`'s registry (made
    on first use); its ref@digest."""
    provider, options = PROVIDERS[cloud], settings.load(cloud, IMAGE)
    local_tag = tag(c, ("serve-" if serve else "") + flavour(cpu))
    if cmd.dry_run:  # placeholders for what is not set yet; the plan lists what is needed
        options, _ = settings.with_placeholders(cloud, options)
        flags = (" --cpu" if cpu else "") + (" --serve" if serve else "")
        print(f"$ invoke build{flags}   # unless {local_tag} is built")
    elif not exists(c, local_tag):
        print(f"no image {local_tag} yet: building it")
        build(c, cpu=cpu, serve=serve)
    repository = provider.ensure_repository(options, cmd)
    if not repository:  # --cloud=local without a registry: the engine runs it by its id
        return image_id(c, local_tag) if not cmd.dry_run else f"{local_tag}@<id>"
    provider.docker_login(options, cmd, DOCKER)
    remote = f"{repository}:{local_tag.rsplit(':', 1)[1]}"
    cmd.run([DOCKER, "tag", local_tag, remote])
    cmd.run([DOCKER, "push", remote])
    if cmd.dry_run:
        return f"{repository}@sha256:<digest of the push>"
    reference = pushed_digest(c, remote)
    pushes = json.loads(PUSHES.read_text()) if PUSHES.exists() else {}
    pushed = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    key = f"{cloud}-serve" if serve else cloud
    pushes[key] = {"image": reference, "tag": remote, "pushed": pushed}
    PUSHES.parent.mkdir(parents=True, exist_ok=True)
    PUSHES.write_text(json.dumps(pushes, indent=2) + "\n")
    return reference
