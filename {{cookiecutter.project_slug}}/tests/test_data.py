"""The data module: built-in digits, files and URIs, and splits that never move."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from {{ cookiecutter.package_name }}.data.sources import kfold_splits, load_arrays, load_splits, load_table
from {{ cookiecutter.package_name }}.data.splits import DataError


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
            if part != "num_classes"}  # fmt: skip
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
        loaded_x, loaded_y = load_arrays(f"{uri_prefix}{tmp_path / name}")
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
    table = load_table(str(tmp_path / "pets.csv"), label="species")
    assert table.classes == ["cat", "dog"] and table.y.tolist() == [0, 1, 0, 1]
    # height, colour as blue/green/red, weight
    assert table.x.tolist()[1] == [2.5, 1.0, 0.0, 0.0, 12.0]
    assert table.columns[1] == {"name": "colour", "encoding": "one-hot",
                                "categories": ["blue", "green", "red"]}  # fmt: skip
    by_number = load_table(str(tmp_path / "pets.csv"), label="2")
    assert np.array_equal(by_number.x, table.x) and by_number.classes == table.classes
    no_header = load_table(str(tmp_path / "pets.csv"), label="2", header=False)
    assert len(no_header.y) == 5  # the names are a row, and `species` one more class
    (tmp_path / "plain.csv").write_text("1,2,0\n3,4,1\n")
    plain = load_table(str(tmp_path / "plain.csv"))
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


def test_bad_sources_are_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"nope\.npz"):
        load_arrays(str(tmp_path / "nope.npz"))
    with pytest.raises(DataError, match="must end with one of"):
        load_arrays(str(tmp_path / "data.parquet"))
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
