"""The data module: built-in digits, files and URIs, and splits that never move."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from {{ cookiecutter.package_name }}.data.preparation import Options
from {{ cookiecutter.package_name }}.data.sources import kfold_splits, load_arrays, load_splits, load_table
from {{ cookiecutter.package_name }}.data.splits import DataError
from {{ cookiecutter.package_name }}.data.summary import lines

AS_IS = Options(scaling="none")


def test_builtin_digits() -> None:
    x, y = load_arrays("builtin:digits")
    assert x.shape == (1797, 1, 8, 8) and x.dtype == np.float32
    assert x.min() >= 0.0 and x.max() <= 1.0
    assert sorted(set(y.tolist())) == list(range(10))


def test_split_is_fixed_stratified_and_disjoint() -> None:
    first = load_splits("builtin:digits", 0.15, 0.15, split_seed=7)
    again = load_splits("builtin:digits", 0.15, 0.15, split_seed=7)
    other = load_splits("builtin:digits", 0.15, 0.15, split_seed=8)
    assert np.array_equal(first.test.y, again.test.y) and np.array_equal(first.test.x, again.test.x)
    assert not np.array_equal(first.test.x, other.test.x)
    assert len(first.train) + len(first.val) + len(first.test) == 1797
    assert abs(len(first.test) - 0.15 * 1797) <= 10
    # Every class appears in every split in about the same share.
    for part in (first.train, first.val, first.test):
        shares = np.bincount(part.y, minlength=10) / len(part)
        assert np.all(np.abs(shares - 0.1) < 0.02)
    rows = {part: {row.tobytes() for row in split.x} for part, split in vars(first).items()
            if part in ("train", "val", "test")}  # fmt: skip
    assert not rows["train"] & rows["test"] and not rows["val"] & rows["test"]


def test_kfold_holds_out_each_sample_once() -> None:
    folds = kfold_splits("builtin:digits", 4, 0.15, 0.15, split_seed=3)
    assert len(folds) == 4
    held_out = np.concatenate([fold.test.x.reshape(len(fold.test), -1) for fold in folds])
    pool = load_splits("builtin:digits", 0.15, 0.15, split_seed=3)
    assert len(held_out) == len(pool.train) + len(pool.val)
    assert len({row.tobytes() for row in held_out}) == len(held_out)


@pytest.mark.parametrize("uri_prefix", ["", "file://"])
def test_npz_and_csv_from_paths_and_uris(tmp_path: Path, uri_prefix: str) -> None:
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10) % 2
    np.savez(tmp_path / "d.npz", x=x, y=y)
    np.savetxt(tmp_path / "d.csv", np.column_stack([x, y]), delimiter=",")
    for name in ("d.npz", "d.csv"):
        loaded = load_table(f"{uri_prefix}{tmp_path / name}", options=AS_IS)
        loaded_x, loaded_y = loaded.x, loaded.y
        assert np.array_equal(loaded_x, x) and np.array_equal(loaded_y, y)


CSV = """height,colour,species,weight
1.5,red,cat,4
2.5,blue,dog,12
1.0,red,cat,3.5
3.0,green,dog,20
"""


def test_a_csv_with_a_header_a_named_label_and_a_text_column(tmp_path: Path) -> None:
    """The header is found, `label` names the label column wherever it is, the label's values
    are the class names (sorted), a text column becomes one 0/1 column per category."""
    (tmp_path / "pets.csv").write_text(CSV)
    table = load_table(str(tmp_path / "pets.csv"), label="species", options=AS_IS)
    assert table.classes == ["cat", "dog"] and table.y.tolist() == [0, 1, 0, 1]
    # height, colour as blue/green/red, weight
    assert table.x.tolist()[1] == [2.5, 1.0, 0.0, 0.0, 12.0]
    assert table.columns[1] == {"name": "colour", "kind": "text", "encoding": "one-hot",
                                "categories": ["blue", "green", "red"]}  # fmt: skip
    by_number = load_table(str(tmp_path / "pets.csv"), label="2", options=AS_IS)
    assert np.array_equal(by_number.x, table.x) and by_number.classes == table.classes
    # Declared without a header, the names are a row: a text among numbers, refused by name.
    with pytest.raises(DataError, match="column 0, row 1: 'height' is not a finite number"):
        load_table(str(tmp_path / "pets.csv"), label="2", header=False)
    (tmp_path / "plain.csv").write_text("1,2,0\n3,4,1\n")
    plain = load_table(str(tmp_path / "plain.csv"), options=AS_IS)
    assert plain.x.tolist() == [[1, 2], [3, 4]] and plain.classes == ["0", "1"]


@pytest.mark.parametrize(
    ("text", "label", "message"),
    [
        ("", None, "pets.csv: empty, no rows"),
        ("a,b,c\n", None, "pets.csv: a header and no rows of data"),
        ("1,2,0\n3,0\n", None, "pets.csv: row 2 has 2 columns, row 1 has 3"),
        (CSV, "kind", "data.label=kind: {path} has no such column; its columns: height, colour"),
        (CSV, "7", "data.label=7: {path} has columns 0 to 3"),
        ("id,y\n" + "".join(f"x{i},{i % 2}\n" for i in range(150)), None,
         "column id holds 150 distinct texts, too many to encode as categories"),
    ],
)  # fmt: skip
def test_a_csv_that_cannot_be_read_is_refused_by_name(
    tmp_path: Path, text: str, label: str | None, message: str
) -> None:
    path = tmp_path / "pets.csv"
    path.write_text(text)
    with pytest.raises(DataError) as caught:
        load_table(str(path), label=label)
    assert message.format(path=path) in str(caught.value)


GAPPY = """size,weight,colour,kind
1.5,,red,cat
NA,4000000,blue,dog
2.5,1000000,,cat
null,2000000,red,dog
3.5,N/A,blue,cat
2.0,3000000,red,dog
"""


def test_missing_cells_are_missing_values_filled_from_the_training_split(tmp_path: Path) -> None:
    """Empty cells and pandas' markers are missing: a number column stays numbers, its gaps the
    train split's median, then standardized with the train split's mean and std; a text
    column's gaps are a category of their own; drop mode leaves those rows out."""
    path = tmp_path / "gappy.csv"
    path.write_text(GAPPY)
    rows = np.array([0, 1, 2, 3])  # the "training split"
    table = load_table(str(path), fractions=None)
    raw = table.raw
    assert raw is not None and raw.missing == [2, 2, 1]
    from {{ cookiecutter.package_name }}.data.sources import fit_table

    prep = fit_table(raw, rows, Options())
    size, weight, colour = prep.columns
    assert size["fill"] == 2.0 and weight["fill"] == 2e6  # medians of rows 0-3's present cells
    filled = np.array([1.5, 2.0, 2.5, 2.0])
    assert size["center"] == pytest.approx(filled.mean())
    assert size["scale"] == pytest.approx(filled.std())
    assert colour["categories"] == ["blue", "red", "(missing)"]
    x = prep.transform(raw.values)
    assert x[:4, 0].mean() == pytest.approx(0, abs=1e-6)
    assert x[:4, 1].std() == pytest.approx(1, abs=1e-5)
    assert x[2, 2:].tolist() == [0, 0, 1]  # colour missing
    # A server's raw rows: the same features for the same cells, nulls and markers alike.
    served = prep.features([[1.5, None, "red"], {"size": "NaN", "weight": 4e6}])
    assert np.allclose(served[0], x[0])  # row 0: 1.5, an empty cell, red
    columns = [np.array([1.5, np.nan]), np.array([np.nan, 4e6]), ["red", None]]
    assert np.allclose(served, prep.transform(columns))
    said = lines(raw, prep, {"train": 4, "val": 1, "test": 1})
    assert "column size: numbers, standard scaling, 2 missing (filled with the train median 2)" in (
        said
    )
    assert "column colour: texts, 3 categories, one-hot, 1 missing (a category of their own)" in (
        said
    )
    assert "classes: cat 3, dog 3" in said
    assert any(line.startswith("warning: class cat has 3 rows (under 10)") for line in said)
    (tmp_path / "flat.csv").write_text("a,b,y\n" + "".join(f"{i},7,{i % 2}\n" for i in range(30)))
    flat = load_table(str(tmp_path / "flat.csv"))
    assert flat.raw is not None and flat.preparation is not None
    said = lines(flat.raw, flat.preparation, {})
    assert "warning: column b holds one value: it tells the model nothing" in said
    dropped = load_table(str(path), options=Options(missing="drop"))
    assert dropped.raw is not None and dropped.raw.dropped == 5 and len(dropped.y) == 1


@pytest.mark.parametrize(
    ("cell", "column", "options", "message"),
    [
        ("abc", "size", Options(), "column size, row 3: 'abc' is not a finite number, in a column"),
        ("inf", "size", Options(), "column size, row 3: 'inf' is not a finite number"),
        ("", "kind", Options(), "column kind, row 3: the label is missing"),
        ("abc", "size", Options(invalid="missing"), None),
        ("", "kind", Options(missing="drop"), None),
    ],
)  # fmt: skip
def test_a_bad_cell_is_refused_in_one_line_naming_it_or_taken_by_the_rule(
    tmp_path: Path, cell: str, column: str, options: Options, message: str | None
) -> None:
    path = tmp_path / "pets.csv"
    lines = CSV.splitlines()
    cells = lines[2].split(",")
    cells[{"size": 0, "kind": 2}[column]] = cell
    names = lines[0].replace("height", "size").replace("species", "kind")
    path.write_text("\n".join([names, lines[1], ",".join(cells), *lines[3:]]) + "\n")
    if message is None:
        table = load_table(str(path), label="kind", options=options)
        assert np.isfinite(table.x).all()
        assert len(table.y) == (3 if options.missing == "drop" else 4)
        return
    with pytest.raises(DataError) as caught:
        load_table(str(path), label="kind", options=options)
    assert str(caught.value).startswith(f"{path}: {message}") and "\n" not in str(caught.value)


def test_bad_sources_are_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.npz"):
        load_arrays(str(tmp_path / "nope.npz"))
    with pytest.raises(DataError, match="must end with one of"):
        load_arrays(str(tmp_path / "data.parquet"))
    with pytest.raises(DataError, match=r"is a folder: make shards of it with `invoke data\."):
        load_arrays(str(tmp_path))
    with pytest.raises(DataError, match="unknown built-in dataset 'mnist'"):
        load_arrays("builtin:mnist")
    np.savez(tmp_path / "wrong.npz", features=np.zeros(3))
    with pytest.raises(DataError, match="must hold arrays 'x' and 'y'"):
        load_arrays(str(tmp_path / "wrong.npz"))


def test_bucket_uri_without_its_backend_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As where s3fs is not installed: a None in sys.modules makes its import fail.
    monkeypatch.setitem(sys.modules, "s3fs", None)
    with pytest.raises(DataError, match="pip install s3fs"):
        load_arrays("s3://bucket/train.npz")
