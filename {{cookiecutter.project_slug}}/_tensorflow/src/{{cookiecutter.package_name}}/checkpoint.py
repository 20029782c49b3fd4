"""Keras checkpoints: the weights in Keras's format and the run state as JSON, in one file that
is written atomically.

`last.weights.h5` holds everything a run needs to continue; `best.weights.h5` the best weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import keras
import numpy as np

from .storage import atomic_write

LAST = "last.weights.h5"
BEST = "best.weights.h5"
# The HDF5 attribute that holds the run state next to the Keras weights.
STATE_ATTRIBUTE = "run_state"


def save(state: dict, path: Path, weights: list[np.ndarray] | None = None) -> None:
    """`state["model"]`'s variables (and its optimizer's) in Keras's weights format; the rest of
    `state` as JSON in the same file, so one atomic rename publishes both. `weights` (from
    `snapshot`) are written instead of the model's current values, which are left as they are."""
    import h5py

    model, rest = state["model"], {key: value for key, value in state.items() if key != "model"}
    text = json.dumps(rest)  # before writing anything: a state JSON cannot hold fails early

    def write(tmp: Path) -> None:
        if weights is None:
            model.save_weights(tmp)
        else:
            current = snapshot(model)
            _assign(model, weights)
            try:
                model.save_weights(tmp)
            finally:
                _assign(model, current)
        with h5py.File(tmp, "a") as handle:
            handle.attrs[STATE_ATTRIBUTE] = text

    atomic_write(path, write, suffix=".weights.h5")  # Keras insists on the suffix


def snapshot(model: keras.Model) -> list[np.ndarray]:
    """Host copies of the model's and its optimizer's variables: a checkpoint to write later."""
    return [variable.numpy() for variable in _variables(model)]


def _assign(model: keras.Model, values: list[np.ndarray]) -> None:
    for variable, value in zip(_variables(model), values, strict=True):
        variable.assign(value)


def _variables(model: keras.Model) -> list:
    optimizer = getattr(model, "optimizer", None)
    return [*model.variables, *(optimizer.variables if optimizer is not None else [])]


def load(path: Path) -> dict:
    """The state saved next to the weights; `model.load_weights(path)` restores the weights."""
    import h5py

    with h5py.File(path, "r") as handle:
        return json.loads(handle.attrs[STATE_ATTRIBUTE])
