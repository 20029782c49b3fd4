"""PyTorch checkpoints: `torch.save` files written atomically, on a background thread, and when.

`last.pt` holds everything a run needs to continue; `best.pt` the best weights with the config
they were trained with.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.schema import CheckpointConfig
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

    def __init__(self, on_written: Callable[[float], None] | None = None) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint")
        self._pending: Future | None = None
        self.on_written = on_written  # called with the seconds a checkpoint took, once on disk

    def save(self, state: dict, path: Path, mirror_uri: str | None = None) -> None:
        self.wait()
        started = time.perf_counter()
        snapshot = cpu_copy(state)
        self._pending = self._pool.submit(self._write, snapshot, path, mirror_uri, started)

    def _write(self, state: dict, path: Path, mirror_uri: str | None, started: float) -> None:
        save(state, path)
        mirror(path, mirror_uri)
        if self.on_written is not None:
            self.on_written(time.perf_counter() - started)

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


def load(path: Path) -> dict:
    """A checkpoint with every tensor on the CPU: `load_state_dict` puts each where its owner
    lives (the optimizer's step counters stay on the CPU), and the RNG states must be CPU
    tensors. weights_only: tensors, numbers, strings and containers, never code; checkpoints of
    earlier versions hold NumPy's RNG key as an array, whose types are allowed for that."""
    import numpy as np
    import torch

    reconstruct = np.ndarray((0,)).__reduce__()[0]  # numpy's _reconstruct, in either NumPy
    array_types: list[Any] = [reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    with torch.serialization.safe_globals(array_types):
        return torch.load(path, map_location="cpu", weights_only=True)


class Checkpoints:
    """When a run writes its checkpoints, and what goes in best.pt.

    last.pt: after an epoch once `min_interval_s` have passed since the last write, every
    `every_n_steps` optimizer steps, at the end and on a stop signal. best.pt: a new best waits
    in host memory and is written just before the next last.pt, so last never runs ahead of best
    and a run that keeps improving writes best.pt once per interval. Only the main process writes.
    """

    def __init__(
        self,
        folder: Path,
        settings: CheckpointConfig,
        is_main: bool,
        extra: dict[str, Any],
        on_written: Callable[[float], None] | None = None,
    ) -> None:
        self.folder, self.settings, self.is_main, self.extra = folder, settings, is_main, extra
        self.saver = BackgroundSaver(on_written)
        self._saved_at = time.monotonic()  # of the last write
        self._unsaved_best: dict | None = None

    def due_after_epoch(self, finished: bool) -> bool:
        return finished or time.monotonic() - self._saved_at >= self.settings.min_interval_s

    def due_at_step(self, step: int) -> bool:
        every = self.settings.every_n_steps
        return every is not None and step % every == 0

    def keep_best(self, weights: dict, metrics: dict[str, float], epoch: int) -> None:
        """Hold a CPU copy of new best weights until the next write."""
        if self.is_main:
            self._unsaved_best = {
                "model": cpu_copy(weights), "metrics": metrics, "epoch": epoch, **self.extra
            }  # fmt: skip

    def write(self, state: dict[str, Any]) -> None:
        """best.pt if the best changed since the last write, then last.pt with `state`."""
        if not self.is_main:
            return
        uri = self.settings.mirror_uri
        if self._unsaved_best is not None:
            self.saver.save(self._unsaved_best, self.folder / BEST, uri)
            self._unsaved_best = None
        self.saver.save({**state, **self.extra}, self.folder / LAST, uri)
        self._saved_at = time.monotonic()

    def restarted(self) -> None:
        """Count the save interval from now (training starts or resumes)."""
        self._saved_at = time.monotonic()

    def best_state(self) -> dict:
        """best.pt, once every pending write is on disk."""
        self.saver.wait()
        return load(self.folder / BEST)

    def close(self) -> None:
        self.saver.close()


@dataclass
class Progress:
    """Where training stands; part of every checkpoint."""

    epoch: int = 0  # epochs completed
    batches_done: int = 0  # batches consumed in the current epoch, for a mid-epoch resume
    global_step: int = 0  # optimizer steps taken
    loss_sum: float = 0.0  # train loss summed over the current epoch's samples
    samples: int = 0
    stopped_early: bool = False  # a re-run of a stopped run only re-tests
