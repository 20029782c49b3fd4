"""A user's own table as it comes (missing cells, a text column, features on scales six orders of
magnitude apart) trains as well as the same table cleaned by hand, and the served model takes
its raw rows, missing cells included, answering as the trained model did."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SHORT, read_metrics, run_module, train
from test_serve import start, stop

from {{ cookiecutter.package_name }} import export as exporting
from {{ cookiecutter.package_name }}.data.sources import kfold_splits, load_table
from {{ cookiecutter.package_name }}.data.splits import split_indices

ROWS = 600
# Enough steps for a small MLP to learn the rule below; deterministic, so the runs compare.
FIT = [*SHORT, "trainer.max_epochs=12", "trainer.limit_train_batches=null", "data=files"]


def write_table(folder: Path) -> tuple[Path, Path]:
    """The same rows twice: raw.csv as a user has it, and clean.npz cleaned by hand (medians
    filled in, each number standardized, colour one-hot with a column for its missing cells)."""
    rng = np.random.default_rng(0)
    small, big = rng.normal(size=ROWS) * 1e-3, rng.normal(size=ROWS) * 1e3  # 1e6 apart
    colour = rng.choice(["red", "green", "blue"], ROWS)
    label = np.where(small / 1e-3 + big / 1e3 + np.where(colour == "red", 1.5, -0.5) > 0,
                     "high", "low")  # fmt: skip
    gaps = [np.arange(ROWS) % k == 0 for k in (11, 13, 17)]
    with (folder / "raw.csv").open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["small", "big", "colour", "label"])
        for i in range(ROWS):
            out.writerow(["" if gaps[0][i] else f"{small[i]:.8f}", "NA" if gaps[1][i] else
                          f"{big[i]:.3f}", "" if gaps[2][i] else colour[i], label[i]])  # fmt: skip
    columns = []
    for values, gap in ((small, gaps[0]), (big, gaps[1])):
        filled = np.where(gap, np.median(values[~gap]), values)
        columns.append((filled - filled.mean()) / filled.std())
    colour = np.where(gaps[2], "?", colour)
    columns += [colour == name for name in ("blue", "green", "red", "?")]
    x = np.stack(columns, axis=1).astype(np.float32)
    np.savez(folder / "clean.npz", x=x, y=(label == "low").astype(np.int64))
    return folder / "raw.csv", folder / "clean.npz"


def test_a_raw_table_trains_as_well_as_cleaned_by_hand_and_is_served_raw(tmp_path: Path) -> None:
    raw, clean = write_table(tmp_path)
    train(tmp_path / "clean", *FIT, f"data.source={clean}")
    done = train(tmp_path / "raw", *FIT, f"data.source={raw}")
    by_hand = read_metrics(tmp_path / "clean")["test/accuracy"]
    as_is = read_metrics(tmp_path / "raw")["test/accuracy"]
    assert by_hand > 0.85, by_hand  # the rule is learnable at all
    assert as_is >= by_hand - 0.03, (as_is, by_hand)
    assert "column big: numbers, standard scaling, 47 missing (filled with the train median" in (
        done.stdout
    )
    saved = json.loads((tmp_path / "raw" / "preparation.json").read_text())
    assert [c["name"] for c in saved["columns"]] == ["small", "big", "colour"]
    # evaluate prepares the raw file with the checkpoint's saved preparation, not a new fit.
    scored = run_module("evaluate", f"ckpt_path={tmp_path / 'raw'}",
                        f"hydra.run.dir={tmp_path / 'scored'}")  # fmt: skip
    assert scored.returncode == 0, scored.stdout
    assert read_metrics(tmp_path / "scored")["test/accuracy"] == pytest.approx(as_is, abs=1e-6)

    # Exported (its parity check runs the raw rows through the saved preparation) and served:
    # the test split's rows as the file has them, empty cells and all, give the run's accuracy.
    folder = exporting.export(str(tmp_path / "raw"))
    with (raw).open(newline="") as handle:
        rows = list(csv.reader(handle))[1:]
    table = load_table(str(raw))
    test = split_indices(table.y, 0.15, 0.15, 1234)[2]
    instances = [rows[i][:3] for i in test]
    assert any("" in row or "NA" in row for row in instances)
    server = start(folder)
    try:
        status, answer = server.post("/invocations", {"instances": instances})
        assert status == 200, answer
        right = [p["class"] == rows[i][3] for p, i in zip(answer["predictions"], test, strict=True)]
        assert np.mean(right) == pytest.approx(as_is, abs=1e-6)
        status, answer = server.post("/invocations", {"instances": [
            [None, None, None], {"small": 0.001, "colour": "red"}]})  # fmt: skip
        assert status == 200 and len(answer["predictions"]) == 2, answer
        status, answer = server.post("/invocations", {"instances": [["x", 1, "red"]]})
        assert status == 400, answer
        assert answer["error"].startswith("instance 0, column small: 'x' is not a finite number")
    finally:
        stop(server)


def test_crossval_fits_each_folds_preparation_on_that_folds_train_part(tmp_path: Path) -> None:
    raw, _ = write_table(tmp_path)
    folds = kfold_splits(str(raw), 3, 0.15, 0.15, 1234)
    for fold in folds:  # standardized with the statistics of its own train rows, no others
        numbers = fold.train.x[:, :2]
        assert np.abs(numbers.mean(axis=0)).max() < 1e-4
        assert np.abs(numbers.std(axis=0) - 1).max() < 1e-3
        assert np.abs(fold.test.x[:, :2].mean(axis=0)).max() > 1e-4  # held out: not fitted on
    assert len({json.dumps(fold.preparation.to_dict()) for fold in folds}) == 3
