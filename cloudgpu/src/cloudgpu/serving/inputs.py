"""A request's inputs, checked before anything is built from them: the one place a body
becomes the model's float32 batch. Every bad request is a RequestError (a 4xx, one line).

    instances(body, shape)          {"instances": [input, ...]} (SageMaker, Vertex AI, Azure ML)
    v2_tensor(body, header, shape)  a KServe V2 infer request, JSON or binary tensor data
    body_limit(shape)               the bytes a body may take (Request.body reads no more)

What a request may cost is bounded by what MAX_INSTANCES inputs of the model's shape need: the
body's bytes, its lists and commas (counted before it is parsed, at the speed of bytes.count),
and a V2 shape's numbers (checked as Python ints before any array is made).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

MAX_INSTANCES = 1024  # per request; more is a 413, not a slow answer
MAX_BODY = 6 * 1024 * 1024  # bytes: SageMaker's real-time payload limit
NUMBER_BYTES = 32  # a JSON number with its separator, generously ("-1.2345678901234567e-308, ")
SLACK_BYTES = 64 * 1024  # the rest of a body: keys, ids, whitespace, a V2 JSON header
TYPES = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16, "INT64": np.int64,
         "INT32": np.int32}  # fmt: skip


class RequestError(ValueError):
    """A bad request: its HTTP status and one line saying what is wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def body_limit(shape: tuple[int, ...]) -> int:
    """The most bytes a body of MAX_INSTANCES inputs of `shape` takes: as JSON numbers or
    as FP64 tensor bytes, with room for the rest; at most MAX_BODY."""
    return min(MAX_BODY, MAX_INSTANCES * math.prod(shape) * NUMBER_BYTES + SLACK_BYTES)


def instances(
    body: bytes, shape: tuple[int, ...], prepare: Callable[[Any], Any] = lambda rows: rows
) -> np.ndarray:
    """The body's {"instances": [...]} as a float32 batch of `shape` inputs; `prepare` turns a
    table model's raw rows into its features first (ServedModel.prepared)."""
    payload = _json(body, shape)
    if not isinstance(payload, dict) or "instances" not in payload:
        raise RequestError(400, 'the body must be a JSON object with "instances": [...]')
    return as_batch(prepare(payload["instances"]), shape)


def v2_tensor(body: bytes, header: str | None, shape: tuple[int, ...]) -> tuple[np.ndarray, str]:
    """A V2 infer request's one input tensor as a float32 batch, and the request's id.
    `header`: Inference-Header-Content-Length, where the JSON ends and binary data starts."""
    split = _header_length(header, len(body))
    request = _json(body[:split], shape)
    try:
        (tensor,) = request["inputs"]
        datatype, dims = tensor["datatype"], tensor["shape"]
    except (KeyError, TypeError, ValueError):
        raise RequestError(400, 'the body must be V2 JSON: {"inputs": [one tensor]}') from None
    if not isinstance(datatype, str) or datatype not in TYPES:
        raise RequestError(400, f"datatype {str(datatype)[:40]!r}: send one of {', '.join(TYPES)}")
    count = _batch_size(dims, shape)
    dtype = np.dtype(TYPES[datatype])
    if header is not None:
        if len(body) - split != count * math.prod(shape) * dtype.itemsize:
            raise RequestError(400, f"shape {dims} takes {count * math.prod(shape)} {datatype} "
                               f"values: {len(body) - split} bytes follow the header")  # fmt: skip
        data = np.frombuffer(body[split:], dtype=dtype)
    else:
        try:
            data = np.asarray(tensor.get("data"), dtype=dtype)
        except (TypeError, ValueError, OverflowError):
            raise RequestError(400, f"the data is not all {datatype} values") from None
        if data.size != count * math.prod(shape):
            raise RequestError(400, f"shape {dims} does not hold the {data.size} values sent")
    batch = data.reshape(count, *shape).astype(np.float32)
    if not np.isfinite(batch).all():
        raise RequestError(400, "the data holds NaN, infinity or values beyond float32's range")
    return batch, str(request.get("id", ""))[:200]


def as_batch(instances: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`instances` (a list, each nested to `shape` or flat with as many numbers) as a float32
    batch; RequestError naming the first that does not fit."""
    if not isinstance(instances, list) or not instances:
        raise RequestError(400, '"instances" must be a non-empty list of inputs')
    if len(instances) > MAX_INSTANCES:
        raise RequestError(413, f"{len(instances)} instances: at most {MAX_INSTANCES} per request")
    size = math.prod(shape)
    try:  # the usual request, checked as one array; the loop below says which instance is bad
        whole = np.asarray(instances)
    except ValueError:  # ragged nesting
        whole = np.asarray(None)
    if whole.dtype.kind in "iuf" and whole.size == len(instances) * size:
        batch = whole.astype(np.float32).reshape(len(instances), *shape)
        if np.isfinite(batch).all():
            return batch
    rows = []
    for index, instance in enumerate(instances):
        try:
            raw = np.asarray(instance)
        except ValueError:  # ragged nesting
            raw = np.asarray(None)
        if raw.dtype.kind not in "iuf":  # text, booleans, nulls, ragged lists: not numbers
            raise RequestError(400, f"instance {index} is not all numbers in a regular nesting")
        row = raw.astype(np.float32)
        if row.size != size:
            raise RequestError(
                400,
                f"instance {index} has shape {list(row.shape)}: each input takes shape "
                f"{list(shape)} ({size} numbers, nested or flat)",
            )
        if not np.isfinite(row).all():
            raise RequestError(400, f"instance {index} holds NaN or infinity (as float32)")
        rows.append(row.reshape(shape))
    return np.stack(rows)


def _json(body: bytes, shape: tuple[int, ...]) -> Any:
    """`body` parsed, once its lists and numbers are known to be few enough for
    MAX_INSTANCES inputs of `shape` (a body of "[0],[0],..." is not parsed at all)."""
    lists = MAX_INSTANCES * sum(math.prod(shape[:depth]) for depth in range(len(shape))) + 16
    if body.count(b"[") > lists or body.count(b",") > MAX_INSTANCES * math.prod(shape) + 64:
        raise RequestError(413, f"the body holds more than {MAX_INSTANCES} inputs of shape "
                           f"{list(shape)}: at most that per request")  # fmt: skip
    try:
        return json.loads(body)
    except RecursionError:
        raise RequestError(400, "the body's JSON nests too deep") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise RequestError(400, 'the body is not JSON: send {"instances": [...]}') from None
    except ValueError:  # an integer past Python's digit limit
        limit = sys.get_int_max_str_digits()
        raise RequestError(400, f"the body holds a number of over {limit} digits") from None


def _header_length(header: str | None, size: int) -> int:
    """Where the JSON part ends: the whole body without the header."""
    if header is None:
        return size
    if not header.isascii() or not header.isdigit() or not 0 < int(header) <= size:
        raise RequestError(400, f"inference-header-content-length {header[:40]!r}: the JSON "
                           f"header's bytes, from 1 to the body's {size}")  # fmt: skip
    return int(header)


def _batch_size(dims: Any, shape: tuple[int, ...]) -> int:
    """How many inputs a V2 shape holds: [N, *shape] or [N, features], N from 1 to
    MAX_INSTANCES, every number a positive int (JSON's, not an array's)."""
    size = math.prod(shape)
    wanted = f"send [N, {', '.join(map(str, shape))}] or [N, {size}], N from 1 to {MAX_INSTANCES}"
    ints = isinstance(dims, list) and all(type(d) is int and d > 0 for d in dims)
    if not ints or list(dims[1:]) not in (list(shape), [size]):
        raise RequestError(400, f"shape {str(dims)[:80]}: {wanted}")
    if dims[0] > MAX_INSTANCES:
        raise RequestError(413, f"shape {str(dims)[:80]}: {wanted}")
    return int(dims[0])
