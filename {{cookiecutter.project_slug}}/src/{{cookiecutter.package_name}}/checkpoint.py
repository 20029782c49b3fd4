"""Checkpoint files: atomic writes, finding the one to resume from, mirroring to a bucket.

A checkpoint is written to a temporary file in the same folder, flushed to disk and renamed over
the old one. A crash halfway through a save leaves the previous checkpoint whole.
"""

from __future__ import annotations

{% if cookiecutter.framework == "tensorflow" %}import json
{% endif %}import logging
import os
import tempfile
from collections.abc import Callable
{%- if cookiecutter.framework == "pytorch" %}
from concurrent.futures import Future, ThreadPoolExecutor
{%- endif %}
from pathlib import Path
{%- if cookiecutter.framework == "pytorch" %}
from typing import Any
{%- endif %}

log = logging.getLogger(__name__)

{% if cookiecutter.framework == "tensorflow" -%}
LAST = "last.weights.h5"
BEST = "best.weights.h5"
# The HDF5 attribute that holds the run state next to the Keras weights.
STATE_ATTRIBUTE = "run_state"
{%- else -%}
LAST = "last.pt"
BEST = "best.pt"
{%- endif %}


def atomic_write(path: Path, write: Callable[[Path], None], suffix: str = ".tmp") -> None:
    """Call `write(tmp_path)`, fsync it, then rename it to `path` (atomic on POSIX)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
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


{% if cookiecutter.framework == "tensorflow" -%}
def save(state: dict, path: Path) -> None:
    """`state["model"]`'s variables (and its optimizer's) in Keras's weights format; the rest of
    `state` as JSON in the same file, so one atomic rename publishes both."""
    import h5py

    model, rest = state["model"], {key: value for key, value in state.items() if key != "model"}
    text = json.dumps(rest)  # before writing anything: a state JSON cannot hold fails early

    def write(tmp: Path) -> None:
        model.save_weights(tmp)
        with h5py.File(tmp, "a") as handle:
            handle.attrs[STATE_ATTRIBUTE] = text

    atomic_write(path, write, suffix=".weights.h5")  # Keras insists on the suffix


def load(path: Path) -> dict:
    """The state saved next to the weights; `model.load_weights(path)` restores the weights."""
    import h5py

    with h5py.File(path, "r") as handle:
        return json.loads(handle.attrs[STATE_ATTRIBUTE])
{%- else -%}
def save(state: dict, path: Path) -> None:
    import torch

    atomic_write(path, lambda tmp: torch.save(state, tmp))


class BackgroundSaver:
    """Writes checkpoints on a background thread, so training does not wait for the disk.

    `save` snapshots the tensors to CPU memory first, so training may go on changing them. One
    write is in flight at a time; `wait` blocks until it is on disk and re-raises its error.
    """

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: Future | None = None

    def save(self, state: dict, path: Path, mirror_uri: str | None = None) -> None:
        self.wait()
        snapshot = cpu_copy(state)
        self._pending = self._pool.submit(self._write, snapshot, path, mirror_uri)

    @staticmethod
    def _write(state: dict, path: Path, mirror_uri: str | None) -> None:
        save(state, path)
        mirror(path, mirror_uri)

    def wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def close(self) -> None:
        self.wait()
        self._pool.shutdown()


def cpu_copy(value: Any) -> Any:
    """A copy of `value` with every tensor in it copied to CPU memory."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: cpu_copy(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(cpu_copy(item) for item in value)
    return value


def load(path: Path, map_location: object = "cpu") -> dict:
    import torch

    # weights_only=False: our checkpoints hold optimizer state and RNG states, not just tensors.
    # Only load checkpoints you wrote yourself.
    return torch.load(path, map_location=map_location, weights_only=False)
{%- endif %}


def resolve(path_or_run_dir: str | Path, name: str = BEST) -> Path:
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


def fetch_mirror(checkpoint_dir: Path, mirror_uri: str | None) -> bool:
    """Download the mirrored last checkpoint when this machine has none (a fresh spot VM)."""
    if not mirror_uri or (checkpoint_dir / LAST).exists():
        return False
    import fsspec

    source = f"{mirror_uri.rstrip('/')}/{LAST}"
    fs, remote_path = fsspec.core.url_to_fs(source)
    if not fs.exists(remote_path):
        return False
    atomic_write(checkpoint_dir / LAST, lambda tmp: fs.get(remote_path, str(tmp)))
    log.info("fetched %s from the mirror", source)
    return True
