"""The data module: built-in digits, files and URIs, and splits that never move."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from {{ cookiecutter.package_name }}.data.sources import kfold_splits, load_arrays, load_splits
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
