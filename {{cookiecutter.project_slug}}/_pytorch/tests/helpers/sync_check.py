"""Train as `python -m PACKAGE.train` does, with CUDA's sync check on inside every training step:
each time a step makes the host wait for the GPU, CUDA's check warns, and the warning is counted
here. Writes {"control": waits seen in one deliberate wait, "steps": checked, "syncs": counted,
"where": the first warnings} as JSON to $SYNC_CHECKED. For test_gpu.py:

    python tests/helpers/sync_check.py debug=short trainer.device=cuda ...
"""

from __future__ import annotations

import json
import os
import runpy
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from {{ cookiecutter.package_name }}.training.loop import Trainer

PACKAGE = "{{ cookiecutter.package_name }}"
steps, syncs = 0, []
unchecked_step = Trainer._train_step


def waits_in(step: Callable[[], object]) -> list[str]:
    """The host's waits for the GPU in `step`, as CUDA's sync check reports them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # Each wait warns "called a synchronizing CUDA operation" (c10/cuda/CUDAFunctions.cpp); the
    # first warning of a process only says that the check is a prototype.
    return [str(w.message) for w in caught if "called a synchronizing" in str(w.message)]


def checked_step(self: Trainer, *args: object) -> None:
    global steps
    syncs.extend(waits_in(lambda: unchecked_step(self, *args)))  # type: ignore[arg-type]
    steps += 1


if __name__ == "__main__":
    # The check must see a wait where there is one: a loss read on the host is one.
    control = len(waits_in(lambda: torch.ones(1, device="cuda").sum().item()))
    Trainer._train_step = checked_step  # type: ignore[method-assign]
    try:
        runpy.run_module(f"{PACKAGE}.train", run_name="__main__")
    finally:
        report = {"control": control, "steps": steps, "syncs": len(syncs), "where": syncs[:3]}
        Path(os.environ["SYNC_CHECKED"]).write_text(json.dumps(report), encoding="utf-8")
