"""Keras checkpoints: the weights in Keras's format and the run state as JSON, in one file that
is written atomically.

`last.weights.h5` holds everything a run needs to continue; `best.weights.h5` the best weights.
"""

from __future__ import annotations

import json
from pathlib import Path

from .storage import atomic_write

LAST = "last.weights.h5"
BEST = "best.weights.h5"
# The HDF5 attribute that holds the run state next to the Keras weights.
STATE_ATTRIBUTE = "run_state"


def save(state: dict, path: Path) -> None:
    """`state["model"]`'s variables (and its optimizer's) in Keras's weights format; the rest of
    `state` as JSON in the same file, so one atomic rename publishes both."""
    import h5py

    model, rest = state["model"], {key: value for key, value in state.items() if key != "model"}
    text = json.dumps(rest)  # before writing anything: a state JSON cannot hold fails early

    def write(tmp: Path) -> None:
        model.save_weights(tmp)
        with h5py.File(tmp, "a") as handle:
            handle.attrs[STATE_ATTRIBUTE] = text

    atomic_write(path, write, suffix=".weights.h5")  # Keras insists on the suffix


def load(path: Path) -> dict:
    """The state saved next to the weights; `model.load_weights(path)` restores the weights."""
    import h5py

    with h5py.File(path, "r") as handle:
        return json.loads(handle.attrs[STATE_ATTRIBUTE])
