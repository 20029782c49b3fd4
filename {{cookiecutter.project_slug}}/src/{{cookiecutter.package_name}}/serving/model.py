"""The model folder `invoke export` writes, loaded for serving (inputs.py checks a request's
inputs against the shape it takes)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.preparation import Preparation
from ..data.splits import DataError
from .inputs import MAX_INSTANCES, RequestError


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
