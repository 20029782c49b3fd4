"""Files that must survive crashes and machines: atomic writes, and copies to a bucket.

A file is written to a temporary name in the same folder, flushed to disk and renamed over the old
one, so a crash halfway through leaves the previous version whole. Checkpoints can also be
mirrored to any fsspec URI (gs://, s3://, az://, file://) so a fresh machine can resume.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def _umask() -> int:
    """This process's umask, read without changing it (the checkpoint thread writes files too)."""
    try:
        status = Path("/proc/self/status").read_text()
        return int(next(line for line in status.splitlines() if line.startswith("Umask:"))[6:], 8)
    except (OSError, StopIteration, ValueError):  # not Linux: set and restore, once, at import
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


# mkstemp makes its file 0600; a result file gets what any new file gets here (0644 usually),
# so a teammate, or another user of a shared volume, can read it.
FILE_MODE = 0o666 & ~_umask()


def atomic_write(path: Path, write: Callable[[Path], object], suffix: str = ".tmp") -> None:
    """Call `write(tmp_path)`, fsync it, then rename it to `path` (atomic on POSIX)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def resolve(path_or_run_dir: str | Path, name: str) -> Path:
    """A checkpoint file, or the named checkpoint inside a run directory."""
    path = Path(path_or_run_dir)
    if path.is_dir():
        path = path / "checkpoints" / name
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}")
    return path


def mirror(path: Path, mirror_uri: str | None) -> None:
    """Copy a checkpoint to `mirror_uri/<name>` (any fsspec URI), so a new VM can resume."""
    if not mirror_uri:
        return
    import fsspec

    target = f"{mirror_uri.rstrip('/')}/{path.name}"
    with fsspec.open(target, "wb") as remote, open(path, "rb") as local:
        remote.write(local.read())
    log.info("mirrored %s to %s", path.name, target)


def fetch_mirror(local: Path, mirror_uri: str | None) -> bool:
    """Download `mirror_uri/<name>` to `local` when this machine has none (a fresh spot VM)."""
    if not mirror_uri or local.exists():
        return False
    import fsspec

    source = f"{mirror_uri.rstrip('/')}/{local.name}"
    fs, remote_path = fsspec.core.url_to_fs(source)
    if not fs.exists(remote_path):
        return False
    atomic_write(local, lambda tmp: fs.get(remote_path, str(tmp)))
    log.info("fetched %s from the mirror", source)
    return True
