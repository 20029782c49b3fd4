"""A table's fitted preparation: what turns a raw row (numbers, texts, missing cells) into the
model's float32 features, fitted on the training split only and saved with the run as
`preparation.json`, so evaluation, cross-validation folds, shards and the served model all
repeat what training did (scikit-learn's SimpleImputer + StandardScaler + OneHotEncoder, as one
small JSON file that needs only numpy).

  missing  fill: a number column's missing cells take the training split's median, a text
           column's are a category of their own; drop: rows with a missing cell are left out
  scaling  standard: (x - mean) / std; minmax: (x - min) / (max - min); none (train split's)
  invalid  refuse: a text or an infinity in a column of numbers stops the run, naming the cell;
           missing: such cells are missing values
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .splits import DataError

FILE = "preparation.json"
# pandas.read_csv's default na_values, with the empty cell: the best-known reader's markers.
NA_MARKERS = frozenset(
    ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
     "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"]
)  # fmt: skip
MISSING_CATEGORY = "(missing)"
CHOICES = {"missing": ("fill", "drop"), "scaling": ("standard", "minmax", "none"),
           "invalid": ("refuse", "missing")}  # fmt: skip


@dataclass(frozen=True)
class Options:
    missing: str = "fill"
    scaling: str = "standard"
    invalid: str = "refuse"

    @classmethod
    def of(cls, data: Any) -> Options:
        """A data config's choices. A run's config made before they existed lacks them: its
        numbers were not scaled, and it had no missing or invalid cells (they were refused)."""
        before = {"missing": "fill", "scaling": "none", "invalid": "refuse"}
        chosen = {name: str(getattr(data, name, None) or old) for name, old in before.items()}
        for name, value in chosen.items():
            if value not in CHOICES[name]:
                raise DataError(f"data.{name}={value}: choose one of {', '.join(CHOICES[name])}")
        return cls(**chosen)


def is_missing(cell: Any) -> bool:
    return (
        cell is None
        or (isinstance(cell, str) and cell.strip() in NA_MARKERS)
        or (isinstance(cell, float) and math.isnan(cell))
    )


def number(cell: Any) -> float | None:
    """A cell as a finite number; None where it is none (a text, an infinity, a boolean)."""
    if isinstance(cell, bool):
        return None
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def category(cell: Any) -> str:
    """A text cell as the category it names (a number sent as JSON names the same one)."""
    if isinstance(cell, float) and cell.is_integer():
        cell = int(cell)
    return str(cell).strip()


@dataclass
class Preparation:
    """The fitted steps, one entry per feature column in file order (the label left out)."""

    options: Options
    label: str
    classes: list[str]
    columns: list[dict[str, Any]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [column["name"] for column in self.columns]

    def transform(self, values: list[Any]) -> np.ndarray:
        """Features from one entry per column: a float array (NaN where missing) for a number
        column, a list of texts (None where missing) for a text column."""
        rows = len(values[0]) if values else 0
        features = []
        for column, cells in zip(self.columns, values, strict=True):
            if column["kind"] == "number":
                x = np.where(np.isnan(cells), column.get("fill", 0.0), cells)
                features.append(((x - column["center"]) / column["scale"])[:, None])
                continue
            codes = {name: i for i, name in enumerate(column["categories"])}
            onehot = np.zeros((rows, len(codes)))
            for row, cell in enumerate(cells):
                # Unseen categories (and missing ones where training had none) are all zeros,
                # as OneHotEncoder(handle_unknown="ignore") makes them.
                index = codes.get(MISSING_CATEGORY if cell is None else cell)
                if index is not None:
                    onehot[row, index] = 1.0
            features.append(onehot)
        return np.concatenate(features, axis=1).astype(np.float32)

    def features(self, instances: list[Any]) -> np.ndarray:
        """Raw rows as a server gets them (each a list of cells in column order, or an object by
        column name; null or a missing marker for a missing cell) as features; DataError
        naming the first bad cell."""
        rows = [self._cells(index, row) for index, row in enumerate(instances)]
        values: list[Any] = []
        for i, column in enumerate(self.columns):
            cells = [row[i] for row in rows]
            where = [f"instance {n}, column {column['name']}" for n in range(len(rows))]
            values.append(parse_column(cells, column["kind"] == "number", self.options, where)[0])
        return self.transform(values)

    def _cells(self, index: int, row: Any) -> list[Any]:
        if isinstance(row, dict):
            unknown = sorted(set(row) - set(self.names))
            if unknown:
                raise DataError(f"instance {index}: no column {unknown[0]!r}; the columns: "
                                f"{', '.join(self.names)}")  # fmt: skip
            return [row.get(name) for name in self.names]
        if not isinstance(row, list) or len(row) != len(self.columns):
            raise DataError(f"instance {index}: give {len(self.columns)} cells, one per column "
                            f"({', '.join(self.names)}), or an object by column name")  # fmt: skip
        return row

    def to_dict(self) -> dict[str, Any]:
        return {"options": vars(self.options), "label": self.label, "classes": self.classes,
                "columns": self.columns}  # fmt: skip

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Preparation:
        return cls(Options(**raw["options"]), raw["label"], list(raw["classes"]), raw["columns"])

    def save(self, folder: Path) -> Path:
        path = folder / FILE
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: Path) -> Preparation | None:
        path = folder / FILE
        if not path.is_file():
            return None
        return cls.from_dict(json.loads(path.read_text(encoding="utf-8")))


def parse_column(
    cells: list[Any], numeric: bool, options: Options, where: list[str]
) -> tuple[Any, int, int]:
    """One column's cells as transform() takes them, with its missing and invalid counts; an
    invalid cell (a text or an infinity among numbers) is refused, naming `where` it is, unless
    `options.invalid` makes it missing. Drop mode refuses a missing cell (no row to drop)."""
    missing = invalid = 0
    out: list[Any] = []
    for cell, place in zip(cells, where, strict=True):
        value: Any = None
        if is_missing(cell):
            missing += 1
        elif numeric and (value := number(cell)) is None:
            if options.invalid == "refuse":
                raise DataError(
                    f"{place}: {cell!r} is not a finite number, in a column of numbers: "
                    "correct or empty it, or set data.invalid=missing"
                )
            invalid += 1
        elif not numeric:
            value = category(cell)
        if value is None and options.missing == "drop":
            raise DataError(f"{place}: a missing value, and the model was trained with "
                            "data.missing=drop: give every cell")  # fmt: skip
        out.append(value)
    if numeric:
        floats = np.array([np.nan if v is None else v for v in out], dtype=np.float64)
        return floats, missing, invalid
    return out, missing, invalid


def fit(
    names: list[str],
    values: list[Any],
    rows: np.ndarray,
    options: Options,
    label: str,
    classes: list[str],
) -> Preparation:
    """Fill values, scaling and categories from `rows` (the training split) of each column."""
    columns: list[dict[str, Any]] = []
    for name, cells in zip(names, values, strict=True):
        if isinstance(cells, np.ndarray):
            seen = cells[rows][~np.isnan(cells[rows])]
            fill = float(np.median(seen)) if len(seen) else 0.0
            x = np.where(np.isnan(cells[rows]), fill, cells[rows])
            center, scale = _scaling(x, options.scaling)
            encoding = f"{options.scaling} scaling"
            columns.append({"name": name, "kind": "number", "encoding": encoding,
                            "fill": fill, "center": center, "scale": scale})  # fmt: skip
            continue
        train = [cells[i] for i in rows]
        categories = sorted({c for c in train if c is not None})
        if any(c is None for c in train):
            categories.append(MISSING_CATEGORY)
        columns.append({"name": name, "kind": "text", "encoding": "one-hot",
                        "categories": categories})  # fmt: skip
    return Preparation(options, label, classes, columns)


def _scaling(x: np.ndarray, scaling: str) -> tuple[float, float]:
    """(center, scale) of a filled column; a constant column keeps scale 1 (no division by 0)."""
    if scaling == "none" or not len(x):
        return 0.0, 1.0
    if scaling == "minmax":
        low, high = float(x.min()), float(x.max())
        return low, (high - low) or 1.0
    return float(x.mean()), float(x.std()) or 1.0
