"""`invoke upgrade`: move the project's pin of this package to another release, then install it
and remake the image locks (`invoke setup`, `invoke lock`).

The pin is the line the template wrote in pyproject.toml, one of:
    "cloudgpu==X.Y.Z"                                              a release on PyPI
    "cloudgpu @ git+URL@cloudgpu-vX.Y.Z#subdirectory=..."          its tag in the template's repo
    "cloudgpu @ file:///..."                                       a clone's copy: nothing to move
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from invoke import Context, Exit, task

from cloudgpu.pins import GIT, PYPI
from cloudgpu.project import ROOT

from . import image, run

VERSION = re.compile(r"\d+(?:\.\d+)*")
RELEASE_TAG = re.compile(rf"refs/tags/cloudgpu-v(?P<version>{VERSION.pattern})$")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def git_releases(url: str) -> list[str]:
    """The versions tagged cloudgpu-vX.Y.Z in the repository at `url`, oldest first."""
    done = subprocess.run(
        ["git", "ls-remote", "--tags", "--refs", url, "cloudgpu-v*"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise Exit(f"error: cannot list the tags of {url}: {last}", code=1)
    found = [m["version"] for line in done.stdout.splitlines() if (m := RELEASE_TAG.search(line))]
    return sorted(set(found), key=version_key)


def pypi_releases() -> list[str]:
    """The versions of cloudgpu on the package index pip is configured with, oldest first."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "cloudgpu"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    listed = re.search(r"Available versions: (.+)", done.stdout)
    if done.returncode != 0 or not listed:
        last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        raise Exit(f"error: pip could not list cloudgpu's releases on its index: {last}", code=1)
    return sorted({v.strip() for v in listed[1].split(",")}, key=version_key)


def moved_pin(text: str, to: str) -> tuple[str, str, str]:
    """pyproject.toml's text with its pin at release `to` (the newest when empty), the version
    it had and the one it has now; an Exit that says why where it cannot move."""
    if to and not VERSION.fullmatch(to):
        raise Exit(f"error: --to {to}: not a release number (X.Y.Z, e.g. 0.2.0)", code=2)
    if found := PYPI.search(text):
        releases, new = pypi_releases(), '"cloudgpu=={}"'
    elif found := GIT.search(text):
        releases = git_releases(found["url"])
        new = found[0].replace(f"cloudgpu-v{found['version']}", "cloudgpu-v{}")
    elif '"cloudgpu @ file:' in text:
        raise Exit("error: this project uses a clone's copy of cloudgpu (a file: pin): "
                   "update that clone instead (git pull), then invoke setup", code=2)  # fmt: skip
    else:
        raise Exit("error: pyproject.toml has no cloudgpu pin to move "
                   '("cloudgpu==X" or "cloudgpu @ git+...@cloudgpu-vX")', code=2)  # fmt: skip
    if not releases:
        raise Exit("error: no release of cloudgpu found to move to", code=1)
    target = to or releases[-1]
    if target not in releases:
        raise Exit(f"error: --to {target}: no such release; choose from {', '.join(releases)}",
                   code=2)  # fmt: skip
    return text.replace(found[0], new.format(target), 1), found["version"], target


@task(
    help={
        "to": "the release to move to, X.Y.Z (default: the newest)",
        "no_install": "change the pin only; install and lock later (invoke setup, invoke lock)",
    }
)
def upgrade(c: Context, to: str = "", no_install: bool = False) -> None:
    """Move the project to another release of the cloudgpu package, then reinstall and re-lock."""
    pyproject: Path = ROOT / "pyproject.toml"
    text, before, after = moved_pin(pyproject.read_text(encoding="utf-8"), to)
    if before == after:
        print(f"cloudgpu is at {after} already")
        return
    pyproject.write_text(text, encoding="utf-8")
    print(f"cloudgpu {before} -> {after} in pyproject.toml (its CHANGELOG.md says what changed)")
    if no_install:
        print("next: invoke setup, then invoke lock")
        return
    run.setup(c)
    image.lock(c)
