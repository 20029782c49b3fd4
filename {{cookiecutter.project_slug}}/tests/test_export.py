"""`invoke export --run RUN`: a trained run as a model folder that a server loads without this
project's code, checked against the trained model, with what drift monitoring compares with."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
from cloudgpu.deploy import sagemaker
from conftest import invoke_cli, read_metrics

from {{ cookiecutter.package_name }} import export as exporting
from {{ cookiecutter.package_name }}.training import formats


@pytest.fixture
def run(short_run: Path, tmp_path: Path) -> Path:
    """A copy of the session's short run, for each test to export into."""
    return Path(shutil.copytree(short_run, tmp_path / "run"))


def test_export_writes_a_model_that_gives_the_runs_test_accuracy(run: Path, tmp_path: Path):
    done = invoke_cli("export", "--run", str(run))
    assert done.returncode == 0, done.stdout + done.stderr
    folder = run / "model"
    card = json.loads((folder / "model.json").read_text())
    assert done.stdout.startswith(f"exported {folder / card['file']} and model.json beside it")
    assert card["format"] == formats.FORMATS[0] and (folder / card["file"]).exists()
    assert card["input"]["shape"] == [1, 8, 8] and card["input"]["dtype"] == "float32"
    assert card["output"]["classes"] == [str(digit) for digit in range(10)]
    assert card["preprocessing"]["source"] == "builtin:digits"
    assert card["run"]["metrics"] == read_metrics(run)
    assert card["run"]["config"]["model"]["_target_"].endswith(("MLP", "CNN"))
    assert len(card["run"]["data_fingerprint"]) == 64
    assert card["parity"]["max_abs_diff"] <= exporting.ATOL
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".model")) == []

    # The exported model alone, on the run's test split: the run's own test accuracy.
    from omegaconf import OmegaConf

    from {{ cookiecutter.package_name }}.data.sources import load

    splits = load(OmegaConf.create(card["run"]["config"]).data)
    predict = formats.load(folder, card["file"])
    accuracy = float(np.mean(predict(splits.test.x.astype(np.float32)).argmax(1) == splits.test.y))
    assert accuracy == pytest.approx(read_metrics(run)["test/accuracy"], abs=1.5 / len(splits.test))
    parity = np.load(folder / "parity.npz")
    assert np.allclose(predict(parity["x"]), parity["logits"], atol=exporting.ATOL, rtol=1e-4)
    assert predict(parity["x"][:1]).shape == (1, 10), "one input: the batch axis is open"
    # SageMaker's archive of it holds the folder whole, nested files too: this module runs in
    # every framework's CI, test_deploy.py's deploys in one, and the layout is each framework's.
    with tarfile.open(sagemaker._pack(folder, tmp_path)) as tar:
        packed = sorted(member.name for member in tar.getmembers())
    assert packed == sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))

    reference = np.load(folder / "reference.npz")
    assert reference["feature_quantiles"].shape == (64, 11)
    assert (
        int(reference["class_counts"].sum())
        == len(splits.val)
        == int(reference["confidence_counts"].sum())
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "error: invoke export needs --run RUN_DIR (or a checkpoint file)"),
        (["--run", "nowhere"], "error: --run nowhere: no such run folder, checkpoint or cloud"),
        (["--run", "/no/such/run"], "error: --run /no/such/run: no such run folder or checkpoint"),
        (["--format", "pickle"], "error: --format 'pickle': this project exports "),
    ],
    ids=["no-run", "missing-run", "missing-path", "unknown-format"],
)
def test_bad_export_commands_get_one_line(run: Path, args: list[str], message: str) -> None:
    if args and args[0] == "--format":
        args = ["--run", str(run), *args]
    done = invoke_cli("export", *args)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(message), line
    assert not (run / "model").exists()


def test_a_run_without_a_checkpoint_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = invoke_cli("export", "--run", str(tmp_path / "empty"))
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'empty'}: no checkpoints/"), line
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_model_that_does_not_match_the_trained_one_is_not_exported(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parity check bites: an exported model whose logits drift past the tolerance leaves no
    model folder, and an earlier good export stays as it was."""
    good = exporting.export(str(run))
    before = (good / "model.json").read_text()
    real_load = formats.load
    monkeypatch.setattr(
        formats, "load", lambda folder, name: lambda x: real_load(folder, name)(x) + 1e-3
    )
    with pytest.raises(exporting.ExportError, match="logits differ from the trained model's"):
        exporting.export(str(run))
    assert (good / "model.json").read_text() == before
    assert [p.name for p in run.iterdir() if p.name.startswith(".model")] == []


def test_invoke_offers_the_formats_the_package_writes() -> None:
    from cloudgpu.tasks.project import framework

    assert framework.EXPORT_FORMATS == formats.FORMATS


def test_a_csv_run_records_how_each_column_became_features(tmp_path: Path) -> None:
    """A file's model card names its classes and each column's encoding (a text column one-hot),
    which a server must repeat on live inputs."""
    from conftest import SHORT, train

    rows = ["size,colour,kind"] + [
        f"{i % 7 + 0.5},{('red', 'blue')[i % 2]},{('cat', 'dog', 'eel')[i % 3]}" for i in range(90)
    ]
    (tmp_path / "pets.csv").write_text("\n".join(rows) + "\n")
    train(tmp_path / "run", *SHORT, "data=files", f"data.source={tmp_path / 'pets.csv'}")
    folder = exporting.export(str(tmp_path / "run"))
    card = json.loads((folder / "model.json").read_text())
    assert card["output"]["classes"] == ["cat", "dog", "eel"]
    assert card["input"]["shape"] == [3]  # size, and colour as two 0/1 columns
    encodings = {column["name"]: column for column in card["preprocessing"]["columns"]}
    assert encodings["colour"]["encoding"] == "one-hot"
    assert encodings["colour"]["categories"] == ["blue", "red"]
