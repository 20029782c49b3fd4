"""KServe's Open Inference Protocol (V2), as Triton's and KServe's clients speak it: one input
tensor in, as JSON data or as the binary tensor extension (a JSON header of
Inference-Header-Content-Length bytes, then the raw values); logits and probabilities out."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .model import RequestError, ServedModel, as_batch

TYPES = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16, "INT64": np.int64,
         "INT32": np.int32}  # fmt: skip


def parse_infer(
    body: bytes, header_length: str | None, shape: tuple[int, ...]
) -> tuple[np.ndarray, str]:
    """An infer request's inputs as a float32 batch, and its id; RequestError if malformed."""
    split = int(header_length) if header_length else len(body)
    try:
        request = json.loads(body[:split])
        (tensor,) = request["inputs"]
        datatype, dims = tensor["datatype"], [int(d) for d in tensor["shape"]]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
        raise RequestError(400, 'the body must be V2 JSON: {"inputs": [one tensor]}') from None
    if datatype not in TYPES:
        raise RequestError(400, f"datatype {datatype!r}: send one of {', '.join(TYPES)}")
    try:
        if header_length:
            data = np.frombuffer(body[split:], dtype=TYPES[datatype])
        else:
            data = np.asarray(tensor.get("data"), dtype=TYPES[datatype])
    except (TypeError, ValueError):
        raise RequestError(400, f"the data is not all {datatype} values") from None
    if not dims or data.size != int(np.prod(dims)):
        raise RequestError(400, f"shape {dims} does not hold the {data.size} values sent")
    return as_batch(list(data.reshape(dims[0], -1)), shape), str(request.get("id", ""))


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
