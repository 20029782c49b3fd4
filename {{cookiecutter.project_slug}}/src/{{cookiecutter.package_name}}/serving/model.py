"""The model folder `invoke export` writes, loaded for serving (inputs.py checks a request's
inputs against the shape it takes)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.preparation import Preparation
from ..data.splits import DataError
from .inputs import MAX_INSTANCES, RequestError

PINNED = "MODEL_SHA256"  # the variable deploy pins the model folder's folder_sha256 in


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


def folder_sha256(folder: Path) -> str:
    """One sha256 of a folder's files, their names and contents, in name order: what deploy pins
    and the server checks before loading (the bucket's copy may have been replaced since)."""
    total = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with path.open("rb") as file:
            content = hashlib.file_digest(file, "sha256").digest()
        total.update(path.relative_to(folder).as_posix().encode() + b"\0" + content)
    return total.hexdigest()


def load(folder: Path, pinned: str = "") -> ServedModel:
    """The model folder's model, ready to call (the framework is imported here); with `pinned`,
    only a folder whose folder_sha256 it is (checked before any of its files is unpickled)."""
    from ..training import formats

    if pinned and (found := folder_sha256(folder)) != pinned:
        raise ValueError(f"{folder}: its files' sha256 is {found[:12]}..., not the deployed "
                         f"model's {pinned[:12]}...: not loaded")  # fmt: skip
    card_file = folder / "model.json"
    if not card_file.is_file():
        raise FileNotFoundError(f"{folder}: no model.json (write one with invoke export --run RUN)")
    card = json.loads(card_file.read_text(encoding="utf-8"))
    predict = formats.load(folder, card["file"])
    return ServedModel(folder, card, predict, Preparation.load(folder))
