"""Serve an exported model: `python -m PACKAGE.serve [--model DIR] [--port N]` (`-h` lists the
rest). The server is the cloudgpu package's (cloudgpu.serving: SageMaker's, Vertex AI's,
Azure ML's and KServe V2's routes, batching, metrics, drift, samples); what is this project's
is how a model folder that `invoke export` wrote is opened, below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cloudgpu.serving import cli

from .data.preparation import Preparation


def open_model(folder: Path, card: dict[str, Any]) -> tuple[Any, Any]:
    """The exported model's predict (float32 batch -> logits) and, for a table, its saved
    preparation (raw rows -> features, as training made them)."""
    from .training import formats  # the framework, imported once the server listens

    preparation = Preparation.load(folder)
    return formats.load(folder, card["file"]), preparation.features if preparation else None


def main(argv: list[str] | None = None) -> None:
    cli.main(open_model, argv, prog=f"python -m {__package__}.serve")


if __name__ == "__main__":
    main()
