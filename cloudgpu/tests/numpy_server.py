"""What a project's serve.py is, for a numpy model (served_model.py): an opener, handed to
cloudgpu.serving.cli. Run as `python numpy_server.py --model DIR [flags]`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from cloudgpu.serving import cli


def open_model(folder: Path, card: dict[str, Any]) -> tuple[Any, None]:
    with np.load(folder / card["file"]) as saved:
        w, b = saved["w"], saved["b"]
    return (lambda batch: np.asarray(batch, np.float32).reshape(len(batch), -1) @ w + b), None


if __name__ == "__main__":
    cli.main(open_model, prog="numpy_server.py")
