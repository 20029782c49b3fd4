"""The model folder `invoke export` writes, loaded for serving, and a request's inputs checked
against what it takes."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..data.preparation import Preparation
from ..data.splits import DataError

MAX_INSTANCES = 1024  # per request; more is a 413, not a slow answer


class RequestError(ValueError):
    """A bad request: its HTTP status and one line saying what is wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ServedModel:
    folder: Path
    card: dict[str, Any]
    predict: Any  # float32 batch -> logits, from training/formats.py
    preparation: Preparation | None = None  # a table's: raw rows -> features

    def prepared(self, instances: Any) -> Any:
        """A table model's raw rows (numbers, texts, null where missing) as feature rows, as
        training prepared them; other models' instances as they are."""
        if self.preparation is None or not isinstance(instances, list) or not instances:
            return instances
        if len(instances) > MAX_INSTANCES:
            return instances  # as_batch answers 413
        try:
            return self.preparation.features(instances).tolist()
        except DataError as error:
            raise RequestError(400, str(error)) from None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.card["input"]["shape"])

    @property
    def classes(self) -> list[str]:
        return list(self.card["output"]["classes"])


def load(folder: Path) -> ServedModel:
    """The model folder's model, ready to call (the framework is imported here)."""
    from ..training import formats

    card_file = folder / "model.json"
    if not card_file.is_file():
        raise FileNotFoundError(f"{folder}: no model.json (write one with invoke export --run RUN)")
    card = json.loads(card_file.read_text(encoding="utf-8"))
    predict = formats.load(folder, card["file"])
    return ServedModel(folder, card, predict, Preparation.load(folder))


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
            raise RequestError(400, f"instance {index} holds NaN or infinity")
        rows.append(row.reshape(shape))
    return np.stack(rows)
