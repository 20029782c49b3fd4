"""A trained run as a model folder a server loads: `python -m PACKAGE.export RUN [--format F]`.

RUN is a run folder (its best checkpoint) or a checkpoint file. The folder, `RUN/model/`, holds:

  the model, in the framework's own format for serving (training/formats.py says which)
  model.json     what it takes and gives (input shape and dtype, class names), the preprocessing
                 the inputs must have had, the run it came from (config, metrics, checkpoint,
                 data fingerprint, git commit) and the parity check it passed
  reference.npz  the validation split's inputs' per-feature decile bins (edges and shares),
                 predicted-class counts and top-confidence histogram: what live traffic is
                 compared with for drift (cloudgpu.serving.drift)
  parity.npz     a fixed batch of validation inputs and the trained model's logits for them
  preparation.json  a table's fitted preparation (data/preparation.py): the server turns raw
                 rows into features with it, and the parity batch is those rows prepared by it

The exported model must give the trained model's logits on that batch within the tolerance
below, or nothing is written and the export fails in one line. The folder appears whole or not
at all (written beside, then renamed).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from cloudgpu.serving.drift import reference
from omegaconf import OmegaConf

from .data.preparation import FILE as PREPARATION_FILE
from .data.preparation import Preparation
from .data.splits import DataError, Split

FOLDER = "model"
PARITY_BATCH = 64
# |exported - trained| <= ATOL + RTOL * |trained|, elementwise, on the parity batch (float32
# graphs may reorder sums: a few ulps of the logits, never a different class).
ATOL, RTOL = 1e-4, 1e-4


class ExportError(Exception):
    """What stops an export, said in one line."""


def fingerprint(*arrays: np.ndarray) -> str:
    """sha256 of the arrays' bytes, shapes and dtypes: the same data gives the same value."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(f"{array.shape}{array.dtype}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def git_commit(folder: Path) -> str | None:
    """The commit the project's checkout is at, with `-dirty` when it has changes; None outside
    a repository. (Exported at the checkout that trained it, it names the code that did.)"""
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40"],
            cwd=folder, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _classes_and_preprocessing(
    data: Any, preparation: Preparation | None
) -> tuple[list[str], dict[str, Any]]:
    """Class names and what was done to the inputs before the model saw them (data read whole:
    a built-in dataset or a file; a table's the run's fitted preparation)."""
    from .data.sources import BUILTIN_PREFIX, load_table, table_options

    source = str(data.source)
    if preparation is not None:
        steps = f"raw rows through {PREPARATION_FILE}: one cell per column, null where missing"
        return preparation.classes, {"source": source, "inputs": steps, **preparation.to_dict()}
    table = load_table(source, **table_options(data))
    if source.startswith(BUILTIN_PREFIX):
        steps = "8x8 pixel counts 0..16 divided by 16, one channel first: (1, 8, 8) float32"
        return table.classes, {"source": source, "inputs": steps}
    return table.classes, {"source": source, "inputs": "float32 features"}


def _raw_parity_rows(data: Any, preparation: Preparation, count: int) -> list[list[Any]]:
    """The first `count` validation rows of the run's table as a client would send them."""
    from .data.sources import load_table, table_options
    from .data.splits import split_indices

    options = table_options(data)
    table = load_table(str(data.source), options["label"], options["header"], options["options"],
                       preparation=preparation)  # fmt: skip
    assert table.raw is not None
    val = split_indices(table.y, data.val_fraction, data.test_fraction, data.split_seed)[1]
    return table.raw.rows(val[:count])


def export(path: str, fmt: str | None = None) -> Path:
    """Export the run or checkpoint at `path`; the model folder written."""
    from .data.sources import load
    from .training import checkpoint, formats, storage
    from .training.scoring import load_trained

    fmt = fmt or formats.FORMATS[0]
    if fmt not in formats.FORMATS:
        raise ExportError(f"--format {fmt!r}: this project exports {', '.join(formats.FORMATS)}")
    given = Path(path)
    if not given.exists():
        raise ExportError(f"{path}: no such run folder or checkpoint")
    try:
        found = storage.resolve(given, checkpoint.BEST)
    except FileNotFoundError:
        raise ExportError(
            f"{path}: no checkpoints/{checkpoint.BEST} (has the run finished an epoch?)"
        ) from None
    state = checkpoint.load(found)
    trained = OmegaConf.create(state["config"])
    model = load_trained(trained.model, found, state, "cpu")
    saved = state.get("preparation")
    preparation = Preparation.from_dict(saved) if saved else None
    splits = load(trained.data, preparation)
    if not isinstance(splits.val, Split) or len(splits.val) == 0:
        raise ExportError(
            "the run's validation split is streamed (data=shards) or empty: export reads it "
            "whole to check the model with, which this version cannot do for shards"
        )
    val_x, val_y = np.asarray(splits.val.x), np.asarray(splits.val.y)
    batch = val_x[:PARITY_BATCH].astype(np.float32)
    # RUN/checkpoints/best.* -> RUN/model; a checkpoint elsewhere -> model/ beside it.
    run_dir = found.parent.parent if found.parent.name == "checkpoints" else found.parent
    final = run_dir / FOLDER
    staging = Path(tempfile.mkdtemp(prefix=f".{FOLDER}-", dir=final.parent))
    try:
        all_logits = formats.logits(model, val_x.astype(np.float32))  # the trained model, once
        expected = all_logits[: len(batch)]
        file_name = formats.write(model, batch, staging, fmt)
        served_batch = batch
        if preparation is not None:  # as the server will: raw rows, the saved preparation
            preparation.save(staging)
            rows = _raw_parity_rows(trained.data, preparation, len(batch))
            served_batch = Preparation.load(staging).features(rows)  # type: ignore[union-attr]
        got = formats.load(staging, file_name)(served_batch)
        gap = float(np.max(np.abs(got - expected) - RTOL * np.abs(expected)))
        if got.shape != expected.shape or gap > ATOL:
            raise ExportError(
                f"the {fmt} model's logits differ from the trained model's by up to "
                f"{np.max(np.abs(got - expected)):.3g} on {len(batch)} validation inputs "
                f"(allowed {ATOL:g} + {RTOL:g} x |logit|): not exported"
            )
        np.savez(staging / "reference.npz", **reference(val_x, all_logits, splits.num_classes))
        np.savez(staging / "parity.npz", x=batch, logits=expected)
        classes, preprocessing = _classes_and_preprocessing(trained.data, preparation)
        metrics_file = run_dir / "metrics.json"
        card = {
            "format": fmt,
            "file": file_name,
            "framework": formats.framework(),
            "input": {"shape": [int(d) for d in state["input_shape"]], "dtype": "float32",
                      "batch": "first axis, any size"},
            "output": {"logits": int(splits.num_classes), "classes": classes},
            "preprocessing": preprocessing,
            "parity": {"inputs": len(batch), "max_abs_diff": float(np.max(np.abs(got - expected))),
                       "atol": ATOL, "rtol": RTOL},
            "run": {
                "checkpoint": str(found.resolve()),
                "config": state["config"],
                "metrics": json.loads(metrics_file.read_text()) if metrics_file.exists() else None,
                "data_fingerprint": fingerprint(val_x, val_y),
                "git_commit": git_commit(Path(__file__).resolve().parent),
            },
            "exported": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }  # fmt: skip
        (staging / "model.json").write_text(json.dumps(card, indent=2, default=str) + "\n")
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def main(argv: list[str] | None = None) -> None:
    from .training import formats

    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.export", description=__doc__.split("\n", 1)[0]
    )
    parser.add_argument("run", help="a run folder (its best checkpoint) or a checkpoint file")
    parser.add_argument("--format", default=formats.FORMATS[0], help=", ".join(formats.FORMATS))
    args = parser.parse_args(argv)
    try:
        folder = export(args.run, args.format)
    except (ExportError, DataError) as error:
        sys.exit(f"error: {error}")
    card = json.loads((folder / "model.json").read_text())
    print(
        f"exported {folder / card['file']} and model.json beside it: logits within "
        f"{card['parity']['max_abs_diff']:.2g} of the trained model's on "
        f"{card['parity']['inputs']} validation inputs"
    )


if __name__ == "__main__":
    main()
