"""A `.csv` as features and labels: the header detected (or declared with `data.header`), the
label column chosen by name or number (`data.label`; the last by default), the class names from
the label's values, and text columns one-hot encoded, each category a 0/1 column, as pandas'
get_dummies and scikit-learn's OneHotEncoder do (an ordinal number would order colours).
"""

from __future__ import annotations

import csv
import io
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .splits import DataError

log = logging.getLogger(__name__)
# More distinct text values than this in a column is no category (an id, free text): refused.
MAX_CATEGORIES = 100


@dataclass(frozen=True)
class Table:
    """Features (float32, one column per number and per category), labels 0..K-1, the class
    names, and how each column of the file became features."""

    x: np.ndarray
    y: np.ndarray
    classes: list[str]
    columns: list[dict[str, Any]] = field(default_factory=list)  # name, encoding, categories


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _has_header(rows: list[list[str]], declared: bool | None) -> bool:
    """Declared, or a first row with a cell that is not a number in a column of numbers, or a
    first row of text above rows of some numbers (csv.Sniffer's idea, without its guessing)."""
    if declared is not None:
        return declared
    first, rest = rows[0], rows[1:]
    if not rest:
        return all(_number(cell) is None for cell in first)
    numeric = [all(_number(row[i]) is not None for row in rest) for i in range(len(first))]
    pairs = zip(first, numeric, strict=True)
    return any(is_num and _number(cell) is None for cell, is_num in pairs)


def _label_index(label: str | int | None, names: list[str], source: str) -> int:
    if label is None:
        return len(names) - 1
    if isinstance(label, int) or str(label).lstrip("-").isdigit():
        index = int(label)
        if -len(names) <= index < len(names):
            return index % len(names)
        raise DataError(f"data.label={label}: {source} has columns 0 to {len(names) - 1}")
    if label in names:
        return names.index(label)
    raise DataError(f"data.label={label}: {source} has no such column; its columns: "
                    f"{', '.join(names)}")  # fmt: skip


def read_csv(
    raw: bytes, source: str, label: str | int | None = None, header: bool | None = None
) -> Table:
    """The table in `raw` (the file at `source`); DataError naming the file and the problem."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        where = f"{error.reason} at byte {error.start}"
        raise DataError(f"{source}: not UTF-8 text ({where})") from None
    rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    if not rows:
        raise DataError(f"{source}: empty, no rows")
    width = len(rows[0])
    for number, row in enumerate(rows, start=1):
        if len(row) != width:
            raise DataError(f"{source}: row {number} has {len(row)} columns, row 1 has {width}")
    if width < 2:
        raise DataError(f"{source}: one column; a table needs features and a label column")
    named = _has_header(rows, header)
    names = [cell.strip() for cell in rows[0]] if named else [str(i) for i in range(width)]
    body = [[cell.strip() for cell in row] for row in rows[int(named) :]]
    if not body:
        raise DataError(f"{source}: a header and no rows of data")
    target = _label_index(label, names, source)
    labels = [row[target] for row in body]
    as_numbers = [_number(value) for value in labels]
    if all(n is not None and float(n).is_integer() and n >= 0 for n in as_numbers):
        y = np.array(as_numbers, dtype=np.int64)
        classes = [str(c) for c in range(int(y.max()) + 1)]
    else:  # named classes, in sorted order
        classes = sorted(set(labels))
        y = np.array([classes.index(value) for value in labels], dtype=np.int64)
    features: list[np.ndarray] = []
    columns: list[dict[str, Any]] = []
    for i, name in enumerate(names):
        if i == target:
            continue
        values = [row[i] for row in body]
        numbers = [_number(value) for value in values]
        if all(n is not None for n in numbers):
            features.append(np.array(numbers, dtype=np.float32)[:, None])
            columns.append({"name": name, "encoding": "number"})
            continue
        categories = sorted(set(values))
        if len(categories) > MAX_CATEGORIES:
            raise DataError(
                f"{source}: column {name} holds {len(categories)} distinct texts, too many to "
                f"encode as categories (at most {MAX_CATEGORIES}): drop it from the file"
            )
        features.append(np.array([[v == c for c in categories] for v in values], np.float32))
        columns.append({"name": name, "encoding": "one-hot", "categories": categories})
        log.info("%s: column %s one-hot encoded: %s", source, name, ", ".join(categories))
    return Table(np.concatenate(features, axis=1), y, classes, columns)
