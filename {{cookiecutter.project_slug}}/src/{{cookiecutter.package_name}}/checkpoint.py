"""PyTorch checkpoints: `torch.save` files written atomically, on a background thread.

`last.pt` holds everything a run needs to continue; `best.pt` the best weights with the config
they were trained with.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .storage import atomic_write, mirror

LAST = "last.pt"
BEST = "best.pt"


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
