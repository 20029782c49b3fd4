"""The model folder `invoke export` writes, loaded for serving through the project's one function
(the contract, below); inputs.py checks a request's inputs against the shape it takes.

The contract: a project's `serve.py` hands `cli.main` an `Opener`, called once per server with
the folder and its model.json (the card), on the server's loading thread. It returns what the
server calls:

    predict(batch)   a float32 array of (N, *card["input"]["shape"]) -> (N, classes) logits
    prepare(rows)    for a table model, raw rows (numbers, texts, None where missing) -> feature
                     rows, raising ValueError on a row it cannot take; None for other models

The card holds at least {"file": ..., "framework": {"name": ...}, "input": {"shape": [...]},
"output": {"classes": [...]}}. Nothing else of the project's reaches the server.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PINNED = "MODEL_SHA256"  # the variable deploy pins the model folder's folder_sha256 in

Predict = Callable[[Any], Any]
Prepare = Callable[[list[Any]], Any]
Opener = Callable[[Path, dict[str, Any]], tuple[Predict, Prepare | None]]


@dataclass
class ServedModel:
    folder: Path
    card: dict[str, Any]
    predict: Predict
    prepare: Prepare | None = None

    def prepared(self, instances: Any) -> Any:
        """A table model's raw rows as feature rows, as training prepared them; other models'
        instances as they are."""
        from .inputs import MAX_INSTANCES, RequestError

        if self.prepare is None or not isinstance(instances, list) or not instances:
            return instances
        if len(instances) > MAX_INSTANCES:
            return instances  # as_batch answers 413
        try:
            return self.prepare(instances).tolist()
        except ValueError as error:
            raise RequestError(400, str(error).splitlines()[0]) from None

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


def load(folder: Path, open_model: Opener, pinned: str = "") -> ServedModel:
    """The model folder's model, ready to call; with `pinned`, only a folder whose
    folder_sha256 it is (checked before `open_model` reads, or unpickles, any of its files)."""
    if pinned and (found := folder_sha256(folder)) != pinned:
        raise ValueError(f"{folder}: its files' sha256 is {found[:12]}..., not the deployed "
                         f"model's {pinned[:12]}...: not loaded")  # fmt: skip
    card_file = folder / "model.json"
    if not card_file.is_file():
        raise FileNotFoundError(f"{folder}: no model.json (write one with invoke export --run RUN)")
    card = json.loads(card_file.read_text(encoding="utf-8"))
    predict, prepare = open_model(folder, card)
    return ServedModel(folder, card, predict, prepare)
