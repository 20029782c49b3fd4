"""The cloudgpu package as a project's images get it (the serving image runs its server; the
training image's export writes its drift reference): `invoke build` copies the release this
project's environment holds (the pin of pyproject.toml) into build/cloudgpu/ of the build
context, with SHA256SUMS, the sha256 of every file; the Dockerfile checks each one there
(`sha256sum --check --strict`) before the image may use it. A workflow that builds with
docker alone stages it first: `python -m cloudgpu.in_image` in the project's folder.

Where pip installed the package from a wheel, each file must still be what pip recorded (its
RECORD): a file changed since is refused, not shipped. An editable install (work on the
package itself) has no such record: its files go as they are.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import shutil
import sys
from pathlib import Path

import cloudgpu
from cloudgpu.pins import pinned_release

NAME = "cloudgpu"
STAGED = Path("build") / NAME  # in the build context; the Dockerfile's builder stage copies it
SUMS = "SHA256SUMS"
SKIPPED = ("__pycache__", ".pyc", ".egg-info")  # made on this machine, not the release's


class StagingError(Exception):
    """The package here is not one the image may hold; one line says why."""


def _recorded() -> dict[str, str]:
    """What pip recorded of the installed package's files: relative path -> sha256 hex."""
    try:
        distribution = importlib.metadata.distribution(NAME)
    except importlib.metadata.PackageNotFoundError:
        return {}
    located = Path(str(distribution.locate_file(f"{NAME}/__init__.py"))).resolve()
    if located != Path(cloudgpu.__file__).resolve():  # another copy than the one imported
        return {}
    files = distribution.files or []
    recorded = {}
    for file in files:
        if file.hash is not None and file.hash.mode == "sha256" and file.parts[0] == NAME:
            digest = base64.urlsafe_b64decode(file.hash.value + "=" * (-len(file.hash.value) % 4))
            recorded[file.as_posix()] = digest.hex()
    return recorded


def package_files() -> dict[str, Path]:
    """The package's files as imported here: 'cloudgpu/...' -> where they are."""
    root = Path(cloudgpu.__file__).resolve().parent
    return {
        f"{NAME}/{path.relative_to(root).as_posix()}": path
        for path in sorted(root.rglob("*"))
        if path.is_file() and not any(skip in path.as_posix() for skip in SKIPPED)
    }


def check_pin(pyproject: str) -> None:
    """The release pyproject.toml pins (a clone's file: pin names none) is the one here."""
    pinned = pinned_release(pyproject)
    if pinned and pinned != cloudgpu.__version__:
        raise StagingError(f"pyproject.toml pins cloudgpu {pinned} and this environment has "
                           f"{cloudgpu.__version__}: run invoke setup")  # fmt: skip


def stage(into: Path) -> int:
    """Write the package's files and SHA256SUMS into `into` (emptied first); their count."""
    recorded, files = _recorded(), package_files()
    contents = {name: path.read_bytes() for name, path in files.items()}  # read once
    sums = []
    for name, data in contents.items():
        digest = hashlib.sha256(data).hexdigest()
        if recorded and recorded.get(name, digest) != digest:
            raise StagingError(f"{files[name]} is not the file pip installed with cloudgpu "
                               f"{cloudgpu.__version__}: reinstall it (invoke setup)")  # fmt: skip
        sums.append(f"{digest}  {name}\n")
    if into.exists():  # written only once every file is checked: never half a release
        shutil.rmtree(into)
    for name, data in contents.items():
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (into / SUMS).write_text("".join(sums), encoding="utf-8")
    return len(contents)


def stage_for_build(pyproject: str, context: Path) -> int:
    """invoke build's: the pinned release staged in `context` (its files' count), or one line
    and exit 1."""
    from invoke import Exit  # on the user's machine only, with the tasks

    try:
        check_pin(pyproject)
        return stage(context / STAGED)
    except StagingError as error:
        raise Exit(f"error: {error}", code=1) from None


def main() -> None:
    """`python -m cloudgpu.in_image`, in a project's folder: what invoke build stages."""
    try:
        check_pin(Path("pyproject.toml").read_text(encoding="utf-8"))
        count = stage(STAGED)
    except (StagingError, OSError) as error:
        sys.exit(f"error: {error}")
    print(f"staged cloudgpu {cloudgpu.__version__} in {STAGED}: {count} files and {SUMS}")


if __name__ == "__main__":
    main()
