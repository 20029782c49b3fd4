"""Train as `python -m PACKAGE.train` does, with CUDA's sync check on inside every training step:
each time a step makes the host wait for the GPU, CUDA's check warns, and the warning is counted
here. Writes {"steps": checked, "syncs": counted, "where": the first warnings} as JSON to
$SYNC_CHECKED. For test_gpu.py:

    python tests/helpers/sync_check.py debug=short trainer.device=cuda ...
"""

from __future__ import annotations

import json
import os
import runpy
import warnings
from pathlib import Path

import torch

from {{ cookiecutter.package_name }}.training.loop import Trainer

PACKAGE = "{{ cookiecutter.package_name }}"
steps, syncs = 0, []
unchecked_step = Trainer._train_step


def checked_step(self: Trainer, *args: object) -> None:
    global steps
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            unchecked_step(self, *args)  # type: ignore[arg-type]
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs.extend(str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message))
    steps += 1


if __name__ == "__main__":
    Trainer._train_step = checked_step  # type: ignore[method-assign]
    try:
        runpy.run_module(f"{PACKAGE}.train", run_name="__main__")
    finally:
        report = {"steps": steps, "syncs": len(syncs), "where": syncs[:3]}
        Path(os.environ["SYNC_CHECKED"]).write_text(json.dumps(report), encoding="utf-8")
