"""Train as `python -m PACKAGE.train` does, with CUDA's sync check raising inside every training
step: a step that makes the host wait for the GPU fails the run. Writes the number of steps it
checked to $SYNC_CHECKED. For test_gpu.py:

    python tests/helpers/sync_check.py debug=short trainer.device=cuda ...
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

import torch

from {{ cookiecutter.package_name }}.training.loop import Trainer

PACKAGE = "{{ cookiecutter.package_name }}"
checked = 0
unchecked_step = Trainer._train_step


def checked_step(self: Trainer, *args: object) -> None:
    global checked
    torch.cuda.set_sync_debug_mode("error")
    try:
        unchecked_step(self, *args)  # type: ignore[arg-type]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    checked += 1


if __name__ == "__main__":
    Trainer._train_step = checked_step  # type: ignore[method-assign]
    try:
        runpy.run_module(f"{PACKAGE}.train", run_name="__main__")
    finally:
        Path(os.environ["SYNC_CHECKED"]).write_text(str(checked), encoding="utf-8")
