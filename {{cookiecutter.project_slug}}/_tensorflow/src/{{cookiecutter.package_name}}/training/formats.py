"""The formats a Keras model is exported in (export.py), each written and loaded back.

saved_model  Keras's model.export: a TensorFlow SavedModel with a `serve` signature whose batch
             axis is open, what TF Serving and tf.saved_model.load take without this project's
             code or Keras.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

FORMATS = ("saved_model",)


def framework() -> dict[str, str]:
    return {"name": "tensorflow", "version": tf.__version__, "keras": keras.__version__}


def logits(model: keras.Model, x: np.ndarray) -> np.ndarray:
    """The trained model's logits for `x`, in inference mode."""
    return np.asarray(model(x, training=False), dtype=np.float32)


def write(model: keras.Model, example: np.ndarray, folder: Path, fmt: str) -> str:
    """The model in `fmt` under `folder`; its folder name."""
    assert fmt == "saved_model", fmt
    del example  # the model's own input spec, batch axis open, is the signature
    model.export(str(folder / "saved_model"), format="tf_saved_model", verbose=False)
    return "saved_model"


def load(folder: Path, file_name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The exported model as a function from a float32 batch to its logits."""
    loaded = tf.saved_model.load(str(folder / file_name))  # kept: it owns the variables

    def run(x: np.ndarray) -> np.ndarray:
        return np.asarray(loaded.serve(tf.constant(x)), dtype=np.float32)

    return run
