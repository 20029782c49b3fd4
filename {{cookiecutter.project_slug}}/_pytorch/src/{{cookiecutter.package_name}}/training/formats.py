"""The formats a PyTorch model is exported in (export.py), each written and loaded back.

pt2   torch.export's ExportedProgram (torch.export.save), the batch axis dynamic: what PyTorch
      recommends for a graph captured ahead of time (TorchScript is deprecated). A server loads it
      with torch.export.load(path).module(), without this project's code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

FORMATS = ("pt2",)


def framework() -> dict[str, str]:
    return {"name": "pytorch", "version": torch.__version__}


@torch.no_grad()
def logits(model: nn.Module, x: np.ndarray) -> np.ndarray:
    """The trained model's logits for `x`, in evaluation mode, on the CPU."""
    model.eval()
    return model(torch.from_numpy(x)).float().numpy()


def write(model: nn.Module, example: np.ndarray, folder: Path, fmt: str) -> str:
    """The model in `fmt` under `folder`; its file name. `example` (two or more inputs) traces
    it; the batch axis stays open."""
    assert fmt == "pt2", fmt
    model.eval()
    batch = {0: torch.export.Dim("batch", min=1, max=1 << 16)}
    program = torch.export.export(model, (torch.from_numpy(example),), dynamic_shapes=(batch,))
    torch.export.save(program, folder / "model.pt2")
    return "model.pt2"


def load(folder: Path, file_name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The exported model as a function from a float32 batch to its logits."""
    module = torch.export.load(folder / file_name).module()

    @torch.no_grad()
    def run(x: np.ndarray) -> np.ndarray:
        return module(torch.from_numpy(x)).float().numpy()

    return run
