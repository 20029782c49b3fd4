"""What a table is, said before training on it (the run's log) and by `invoke data.prepare`:
rows and columns, each column's type, encoding and missing cells, the class balance and the
split sizes; warnings for a class too small to be in every split and a column that never varies.
"""

from __future__ import annotations

import logging

import numpy as np

from .preparation import Preparation
from .tables import RawTable

log = logging.getLogger(__name__)
TINY_CLASS = 10  # rows; fewer leave a split with one or none of the class


def lines(table: RawTable, preparation: Preparation, sizes: dict[str, int]) -> list[str]:
    """The summary, one line each; warnings start with `warning:`."""
    rows = len(table.y)
    dropped = f", {table.dropped} left out for a missing cell" if table.dropped else ""
    split = ", ".join(f"{n} {k}" for k, n in sizes.items())
    said = [f"{table.source}: {rows} rows{dropped}, {len(table.names)} feature columns and "
            f"label {table.label}; split {split}"]  # fmt: skip
    warnings = []
    for column, values, missing, invalid in zip(
        preparation.columns, table.values, table.missing, table.invalid, strict=True
    ):
        name, how = column["name"], column["encoding"]
        if column["kind"] == "number":
            done = f"filled with the train median {column['fill']:.6g}"
            kind = "numbers"
        else:
            done = "a category of their own"
            kind = f"texts, {len(column['categories'])} categories"
        if table.dropped:
            done = "rows left out"
        gaps = f"{missing} missing ({done})" if missing else "none missing"
        if invalid:
            gaps += f", {invalid} not numbers taken as missing"
        said.append(f"column {name}: {kind}, {how}, {gaps}")
        if len({v for v in _present(values)}) <= 1:
            warnings.append(f"warning: column {name} holds one value: it tells the model nothing")
    counts = np.bincount(table.y, minlength=len(preparation.classes))
    said.append("classes: " + ", ".join(f"{c} {n}" for c, n in zip(preparation.classes, counts,
                                                                  strict=True)))  # fmt: skip
    for name, count in zip(preparation.classes, counts, strict=True):
        if count < TINY_CLASS:
            warnings.append(f"warning: class {name} has {count} rows (under {TINY_CLASS}): too few "
                            "to learn from and to score in every split")  # fmt: skip
    return said + warnings


def _present(values: object) -> list[object]:
    if isinstance(values, np.ndarray):
        return values[~np.isnan(values)].tolist()
    return [v for v in values if v is not None]  # type: ignore[attr-defined]


def log_summary(table: RawTable, preparation: Preparation, sizes: dict[str, int]) -> None:
    for line in lines(table, preparation, sizes):
        if line.startswith("warning: "):
            log.warning(line.removeprefix("warning: "))
        else:
            log.info(line)
