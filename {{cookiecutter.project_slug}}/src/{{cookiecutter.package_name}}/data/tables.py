"""A `.csv` as columns and labels: the header detected (or declared with `data.header`), the
label column chosen by name or number (`data.label`; the last by default), the class names from
the label's values, missing cells found (pandas' markers, preparation.py), and each column a
column of numbers or of texts (categories, one-hot encoded by preparation.py: an ordinal number
would order colours). Rows with a missing cell are left out here under `data.missing=drop`.
"""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .preparation import Options, Preparation, is_missing, number, parse_column
from .splits import DataError

log = logging.getLogger(__name__)
# More distinct text values than this in a column is no category (an id, free text): refused.
MAX_CATEGORIES = 100


@dataclass(frozen=True)
class Table:
    """Features (float32, one column per number and per category), labels 0..K-1, the class
    names, and, for a .csv, its columns as read and the preparation that made the features."""

    x: np.ndarray
    y: np.ndarray
    classes: list[str]
    columns: list[dict[str, Any]] = field(default_factory=list)  # name, encoding, categories
    raw: RawTable | None = None
    preparation: Preparation | None = None


@dataclass(frozen=True)
class RawTable:
    """A .csv's feature columns as preparation.transform takes them, its labels and classes."""

    source: str
    label: str
    names: list[str]
    values: list[Any]  # per column: floats (NaN where missing), or texts (None where missing)
    y: np.ndarray
    classes: list[str]
    missing: list[int]  # per column, cells missing in the file
    invalid: list[int]  # per column, texts among numbers taken as missing (data.invalid=missing)
    dropped: int = 0  # rows left out for a missing cell (data.missing=drop)

    def rows(self, indices: np.ndarray) -> list[list[Any]]:
        """Those rows as a client sends them: numbers, texts, None for a missing cell."""
        return [[_cell(column, int(i)) for column in self.values] for i in indices]


def _cell(column: Any, i: int) -> Any:
    value = column[i]
    if isinstance(column, np.ndarray):
        return None if np.isnan(value) else float(value)
    return value


def _is_number_column(cells: list[str]) -> bool:
    """Most of its present cells numbers (the rest are invalid cells, not categories)."""
    present = [cell for cell in cells if not is_missing(cell)]
    numbers = sum(number(cell) is not None or _is_infinity(cell) for cell in present)
    return numbers * 2 > len(present) or not present


def _is_infinity(cell: str) -> bool:
    try:
        return not np.isfinite(float(cell))
    except ValueError:
        return False


def _has_header(rows: list[list[str]], declared: bool | None) -> bool:
    """Declared, or a first row with a cell that is not a number in a column of numbers, or a
    first row of text above rows of some numbers (csv.Sniffer's idea, without its guessing)."""
    if declared is not None:
        return declared
    first, rest = rows[0], rows[1:]
    if not rest:
        return all(number(cell) is None for cell in first)
    numeric = [
        all(number(row[i]) is not None or is_missing(row[i]) for row in rest)
        and any(number(row[i]) is not None for row in rest)
        for i in range(len(first))
    ]
    pairs = zip(first, numeric, strict=True)
    return any(is_num and number(cell) is None for cell, is_num in pairs)


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


def _rows(raw: bytes, source: str) -> list[tuple[int, list[str]]]:
    """The file's non-blank rows, each with its row number in the file."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        where = f"{error.reason} at byte {error.start}"
        raise DataError(f"{source}: not UTF-8 text ({where})") from None
    rows = [(number, [cell.strip() for cell in row])
            for number, row in enumerate(csv.reader(io.StringIO(text)), start=1)
            if any(cell.strip() for cell in row)]  # fmt: skip
    if not rows:
        raise DataError(f"{source}: empty, no rows")
    width = len(rows[0][1])
    for number_, row in rows:
        if len(row) != width:
            raise DataError(f"{source}: row {number_} has {len(row)} columns, row 1 has {width}")
    if width < 2:
        raise DataError(f"{source}: one column; a table needs features and a label column")
    return rows


def read_csv(
    raw: bytes,
    source: str,
    label: str | int | None = None,
    header: bool | None = None,
    options: Options | None = None,
) -> RawTable:
    """The table in `raw` (the file at `source`); DataError naming the file, and the column, row
    and value where a cell is the problem."""
    options = options or Options()
    rows = _rows(raw, source)
    named = _has_header([row for _, row in rows], header)
    width = len(rows[0][1])
    names = rows[0][1] if named else [str(i) for i in range(width)]
    body = rows[int(named) :]
    if not body:
        raise DataError(f"{source}: a header and no rows of data")
    target = _label_index(label, names, source)
    keep = [not is_missing(row[target]) for _, row in body]
    if not all(keep) and options.missing != "drop":
        number_ = body[keep.index(False)][0]
        raise DataError(f"{source}: column {names[target]}, row {number_}: the label is missing: "
                        "give it, or leave such rows out with data.missing=drop")  # fmt: skip
    parsed, missing, invalid = [], [], []
    features = [i for i in range(width) if i != target]
    for i in features:
        cells = [row[i] for _, row in body]
        where = [f"{source}: column {names[i]}, row {n}" for n, _ in body]
        # Drop mode leaves rows out below: here a missing cell is only counted.
        counting = Options("fill", options.scaling, options.invalid)
        values, gone, bad = parse_column(cells, _is_number_column(cells), counting, where)
        if not isinstance(values, np.ndarray):
            distinct = len({v for v in values if v is not None})
            if distinct > MAX_CATEGORIES:
                raise DataError(
                    f"{source}: column {names[i]} holds {distinct} distinct texts, too many to "
                    f"encode as categories (at most {MAX_CATEGORIES}): drop it from the file"
                )
        parsed.append(values)
        missing.append(gone)
        invalid.append(bad)
    if options.missing == "drop":
        keep = [k and not any(_absent(v, r) for v in parsed) for r, k in enumerate(keep)]
    chosen = np.flatnonzero(keep)
    if not len(chosen):
        raise DataError(f"{source}: every row has a missing cell, and data.missing=drop "
                        "leaves them all out: use data.missing=fill")  # fmt: skip
    if len(chosen) < len(body):
        parsed = [v[chosen] if isinstance(v, np.ndarray) else [v[r] for r in chosen]
                  for v in parsed]  # fmt: skip
    labels = [body[r][1][target] for r in chosen]
    y, classes = _labels(labels)
    return RawTable(source, names[target], [names[i] for i in features], parsed, y, classes,
                    missing, invalid, dropped=len(body) - len(chosen))  # fmt: skip


def _absent(values: Any, row: int) -> bool:
    value = values[row]
    return value is None or (isinstance(value, float) and np.isnan(value))


def _labels(labels: list[str]) -> tuple[np.ndarray, list[str]]:
    """Labels 0..K-1 and the class names: numbers 0..K-1 as they are, texts in sorted order."""
    as_numbers = [number(value) for value in labels]
    if all(n is not None and float(n).is_integer() and n >= 0 for n in as_numbers):
        y = np.array(as_numbers, dtype=np.int64)
        return y, [str(c) for c in range(int(y.max()) + 1)]
    classes = sorted(set(labels))
    codes = {name: i for i, name in enumerate(classes)}
    return np.array([codes[value] for value in labels], dtype=np.int64), classes
