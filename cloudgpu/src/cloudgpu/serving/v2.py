"""KServe's Open Inference Protocol (V2), as Triton's and KServe's clients speak it: one input
tensor in, as JSON data or as the binary tensor extension (a JSON header of
Inference-Header-Content-Length bytes, then the raw values: read by inputs.v2_tensor); logits
and probabilities out."""

from __future__ import annotations

from typing import Any

import numpy as np

from .model import ServedModel


def infer_answer(
    name: str, request_id: str, logits: np.ndarray, probabilities: np.ndarray
) -> dict[str, Any]:
    def output(label: str, values: np.ndarray) -> dict[str, Any]:
        return {"name": label, "datatype": "FP32", "shape": list(values.shape),
                "data": values.astype(np.float32).ravel().tolist()}  # fmt: skip

    outputs = [output("logits", logits), output("probabilities", probabilities)]
    return {"model_name": name, "id": request_id, "outputs": outputs}


def metadata(name: str, model: ServedModel) -> dict[str, Any]:
    classes = len(model.classes)
    return {
        "name": name,
        "platform": model.card["framework"]["name"],
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, *model.shape]}],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, classes]},
                    {"name": "probabilities", "datatype": "FP32", "shape": [-1, classes]}],
    }  # fmt: skip
