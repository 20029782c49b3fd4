"""Bad overrides and bad data fail before any work: one line with the key, the value and the rule,
exit status 2, and no run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import CONFIG_DIR, SHORT, run_module, train
from hydra import compose, initialize_config_dir
from hydra.utils import get_object
from omegaconf import OmegaConf

from {{ cookiecutter.package_name }}.config import preflight
from {{ cookiecutter.package_name }}.config.checks import target_arguments
from {{ cookiecutter.package_name }}.config.schema import HYDRA_KEYS, TARGET_RULES, register, wants

register()

# override -> what the one line must say. Every key of the configs appears at least once.
BAD = {
    "optimizer.lr=abc": "optimizer.lr=abc must be a number above 0",
    "optimizer.lr=-1": "optimizer.lr=-1 must be a number above 0",
    "optimizer.weight_decay=-0.1": "optimizer.weight_decay=-0.1 must be a number of at least 0",
    "optimizer=sgd optimizer.momentum=1.0": "optimizer.momentum=1.0 must be a number from 0 up",
    "model.dropout=1.5": "model.dropout=1.5 must be a number from 0 up to, not including, 1",
    "model.hidden_sizes=[256,0]": "model.hidden_sizes=[256,0] must be a list of integers of at",
    "optimizer=sgd optimizer.nesterov=yes": "optimizer.nesterov=yes must be true or false",
    "model=cnn model.channels=[-1]": "model.channels=[-1] must be a list of integers of at least 1",
    "scheduler.warmup_fraction=1": "scheduler.warmup_fraction=1 must be a number from 0 up",
    "scheduler.min_lr_ratio=2": "scheduler.min_lr_ratio=2 must be a number from 0 to 1",
    "trainer.max_epochs=0": "trainer.max_epochs=0 must be an integer of at least 1",
    "data=shards data.source=s data.shards.shuffle_block=0": "shuffle_block=0 must be an integer",
    "data=shards data.source=s data.shards.cache_gb=-1": "data.shards.cache_gb=-1 must be a number",
    "trainer.max_epochs=ten": "trainer.max_epochs=ten must be an integer of at least 1",
    "trainer.device=tpu": "trainer.device=tpu must be one of auto, cpu, cuda, mps",
    "trainer.precision=fp8": "trainer.precision=fp8 must be one of fp32, bf16, fp16, mixed",
    "trainer.accumulate_grad_batches=0": "trainer.accumulate_grad_batches=0 must be an integer",
    "trainer.gradient_clip_norm=0": "trainer.gradient_clip_norm=0 must be null or a number above 0",
    "trainer.compile=maybe": "trainer.compile=maybe must be true or false",
    "trainer.deterministic=often": "trainer.deterministic=often must be true or false",
    "trainer.log_every_n_steps=0": "trainer.log_every_n_steps=0 must be an integer of at least 1",
    "trainer.stop_check_every_n_steps=-2": "stop_check_every_n_steps=-2 must be an integer of",
    "trainer.progress_bar=sometimes": "trainer.progress_bar=sometimes must be null or true or",
    "trainer.limit_train_batches=0": "trainer.limit_train_batches=0 must be null or an integer",
    "trainer.limit_eval_batches=-2": "trainer.limit_eval_batches=-2 must be null or an integer",
    "data.batch_size=0": "data.batch_size=0 must be an integer of at least 1",
    "data.val_fraction=0": "data.val_fraction=0 must be a number between 0 and 1",
    "data.test_fraction=1.5": "data.test_fraction=1.5 must be a number between 0 and 1",
    "data.val_fraction=0.5 data.test_fraction=0.5": "must add up to less than 1",
    "data.split_seed=x": "data.split_seed=x must be an integer",
    "data.num_workers=-1": "data.num_workers=-1 must be auto or an integer of at least 0",
    "data.num_workers=many": "data.num_workers=many must be auto or an integer of at least 0",
    "data.folds=1": "data.folds=1 must be an integer of at least 2",
    "data=files": "data.source has no value; set it: data.source=...",
    "callbacks.early_stopping.monitor=loss": "callbacks.early_stopping.monitor=loss must be a",
    "callbacks.early_stopping.mode=up": "callbacks.early_stopping.mode=up must be one of min, max",
    "callbacks.early_stopping.patience=0": "callbacks.early_stopping.patience=0 must be an integer",
    "callbacks.early_stopping.min_delta=-1": "callbacks.early_stopping.min_delta=-1 must be a",
    "callbacks.checkpoint.monitor=val/acc": "callbacks.checkpoint.monitor=val/acc must be a metric",
    "callbacks.checkpoint.mode=best": "callbacks.checkpoint.mode=best must be one of min, max",
    "callbacks.checkpoint.every_n_steps=0": "callbacks.checkpoint.every_n_steps=0 must be null or",
    "callbacks.checkpoint.min_interval_s=-5": "callbacks.checkpoint.min_interval_s=-5 must be a",
    "monitoring=prometheus monitoring.port=80": "monitoring.port=80 must be an integer from 1024",
    "monitoring.pushgateway=host:9091": "monitoring.pushgateway=host:9091 must be null or an http",
    "monitoring.enabled=maybe": "monitoring.enabled=maybe must be true or false",
    "monitoring=grafana": "monitoring=grafana: configs/monitoring/ has no grafana.yaml",
    "seed=abc": "seed=abc must be an integer",
    "test=perhaps": "test=perhaps must be true or false",
    "optimized_metric=val/f1": "optimized_metric=val/f1 must be null or a metric a run returns",
    "tags=5": "tags=5 must be a list",
    "model=transformer": "model=transformer: configs/model/ has no transformer.yaml; choose one of",
    "trainer.max_epoch=3": "trainer.max_epoch: no such key; did you mean trainer.max_epochs?",
    "+trainer.max_epoch=3": "trainer.max_epoch: no such key; did you mean trainer.max_epochs?",
    "+sed=3": "sed: no such key; did you mean seed?",
    "optimizer.lrr=0.1": "optimizer.lrr: no such key; did you mean optimizer.lr?",
    "+model.hidden=[8]": "model.hidden: ",
    "tags=[it's]": "tags=[it's]: not an override Hydra can read; quote a value that holds",
}
# Keys that hold free text or Hydra's own settings: any value is fine.
FREE = {"task_name", "ckpt_path", "tags", "callbacks.checkpoint.mirror_uri", "data.source", "paths",
        "monitoring.host", "monitoring.targets_dir"}  # fmt: skip


def problem(*overrides: str, config: str = "train") -> str:
    with pytest.raises(preflight.BadCommandLine) as caught:
        preflight.check_overrides(config, list(overrides))
    return str(caught.value)


@pytest.mark.parametrize("overrides", BAD, ids=list(BAD))
def test_a_bad_value_is_named_with_its_rule(overrides: str) -> None:
    assert BAD[overrides] in problem(*overrides.split())


def leaves(node: Any, path: str = "") -> list[str]:
    """Every dotted key of a plain config that holds a value, not a group."""
    if isinstance(node, dict):
        return [leaf for key, value in node.items() for leaf in leaves(value, f"{path}{key}.")]
    return [path.rstrip(".")]


def covered(cfg: Any, path: str) -> bool:
    """Whether something checks the key at `path`: the typed schema, a rule for a `_target_`
    group's key, or its target's signature (a typed argument, or **kwargs the target reads)."""
    if wants(path) is not None or path in TARGET_RULES:
        return True
    parent, _, name = path.rpartition(".")
    node = OmegaConf.select(cfg, parent) if parent else None
    if name in HYDRA_KEYS or node is None or "_target_" not in node:
        return False
    hints, open_ended = target_arguments(get_object(node._target_))
    return name in hints or open_ended


@pytest.mark.parametrize(
    "group",
    ["", "model=cnn", "optimizer=sgd", "scheduler=constant", "data=shards",
     "monitoring=prometheus"],
)  # fmt: skip
def test_every_key_of_the_configs_has_a_type_or_a_rule(group: str) -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[group] if group else [])
    unchecked = [
        path
        for path in leaves(OmegaConf.to_container(cfg))
        if not covered(cfg, path)
        and path.rsplit(".", 1)[-1] not in HYDRA_KEYS
        and not any(path == free or path.startswith(f"{free}.") for free in FREE)
    ]
    assert unchecked == []


def test_good_command_lines_pass() -> None:
    preflight.check_overrides("train", ["model=cnn", "optimizer=sgd", "trainer.max_epochs=2"])
    preflight.check_overrides("train", ["+optimizer.betas=[0.9,0.99]"])  # an AdamW argument
    preflight.check_overrides("train", ["-m", "optimizer.lr=0.001,0.01"])
    preflight.check_overrides("crossval", ["data.folds=3"])
    preflight.check_overrides("train", ["--cfg", "job"])  # Hydra's own flags: Hydra's business


def test_every_job_of_a_sweep_is_checked() -> None:
    assert "optimizer.lr=-0.01 must be a number above 0" in problem(
        "-m", "optimizer.lr=0.001,-0.01"
    )


def test_evaluate_needs_a_checkpoint(tmp_path: Path) -> None:
    assert "ckpt_path has no value" in problem(config="evaluate")
    missing = tmp_path / "nowhere"
    assert f"ckpt_path={missing}: no checkpoint at" in problem(
        f"ckpt_path={missing}", config="evaluate"
    )
    assert "split=dev must be one of train, val, test" in problem(
        "ckpt_path=x", "split=dev", config="evaluate"
    )


# --- the real command line ---


def assert_refused(result: Any, message: str, run_dir: Path) -> None:
    """Exit 2, one line naming the problem, and no run directory."""
    assert result.returncode == 2, result.stdout
    lines = result.stdout.strip().splitlines()
    assert lines == [f"error: {message}"] or (len(lines) == 1 and message in lines[0]), lines
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "override",
    ["optimizer.lr=abc", *(pytest.param(o, marks=pytest.mark.slow)
                           for o in ("trainer.max_epochs=0", "trainer.max_epoch=3"))],
)  # fmt: skip
def test_the_command_stops_before_making_a_run_directory(tmp_path: Path, override: str) -> None:
    result = run_module("train", *SHORT, override, f"hydra.run.dir={tmp_path}/run")
    assert_refused(result, BAD[override], tmp_path / "run")


@pytest.mark.slow
@pytest.mark.parametrize(
    "override",
    ["data.batch_size=0", "optimizer.lr=-1", "+trainer.max_epoch=3", "model=transformer"],
)
def test_more_bad_values_stop_the_command(tmp_path: Path, override: str) -> None:
    result = run_module("train", *SHORT, override, f"hydra.run.dir={tmp_path}/run")
    assert_refused(result, BAD[override], tmp_path / "run")


@pytest.mark.slow
def test_resuming_with_another_model_is_refused_and_leaves_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "my-run"
    train(run_dir, "debug=fast", "logger=jsonl")
    saved = {p: p.read_bytes() for p in [run_dir / "config.yaml", *(run_dir / ".hydra").iterdir()]}
    result = run_module("train", "debug=fast", "logger=jsonl", f"hydra.run.dir={run_dir}",
                        "model=cnn")  # fmt: skip
    assert result.returncode == 2, result.stdout
    (line,) = result.stdout.strip().splitlines()
    assert f"hydra.run.dir={run_dir} holds a run with other settings (model._target_," in line
    assert "start a new run with another hydra.run.dir" in line
    assert {p: p.read_bytes() for p in saved} == saved


@pytest.mark.slow
def test_missing_data_file_is_named_before_a_run_folder(tmp_path: Path) -> None:
    missing = tmp_path / "absent.npz"
    run_dir = tmp_path / "run"
    result = run_module(
        "train", *SHORT, "data=files", f"data.source={missing}", f"hydra.run.dir={run_dir}"
    )
    assert result.returncode == 2
    assert result.stdout == f"error: data.source={missing}: no such file\n"
    assert not run_dir.exists()


@pytest.mark.slow
def test_an_empty_csv_stops_in_one_line_and_leaves_no_run_folder(tmp_path: Path) -> None:
    (tmp_path / "empty.csv").write_text("height,species\n")
    run_dir = tmp_path / "run"
    result = run_module("train", *SHORT, "data=files", f"data.source={tmp_path / 'empty.csv'}",
                        f"hydra.run.dir={run_dir}")  # fmt: skip
    assert result.returncode == 2, result.stdout
    assert result.stdout.strip().splitlines() == [
        f"error: {tmp_path / 'empty.csv'}: a header and no rows of data"
    ]
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_csv_with_a_header_and_a_named_label_trains(tmp_path: Path) -> None:
    rows = "".join(f"{i % 7},{i % 3},{('up', 'down')[i % 2]}\n" for i in range(90))
    (tmp_path / "moves.csv").write_text("a,b,direction\n" + rows)
    result = run_module(
        "train", *SHORT, "data=files", f"data.source={tmp_path / 'moves.csv'}",
        "data.label=direction", f"hydra.run.dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert "input (2,), 2 classes" in result.stdout


def test_data_files_require_a_source() -> None:
    result = run_module("train", *SHORT, "data=files")
    assert result.returncode == 2
    assert "data.source has no value" in result.stdout


@pytest.mark.slow
def test_own_npz_data_trains(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    np.savez(tmp_path / "mine.npz", x=x, y=y)
    result = run_module(
        "train", *SHORT, "data=files", f"data.source=file://{tmp_path}/mine.npz",
        f"hydra.run.dir={tmp_path}/run",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert "input (12,), 2 classes" in result.stdout


@pytest.mark.slow
def test_grayscale_images_train_with_the_cnn_as_one_channel(tmp_path: Path) -> None:
    """An .npz of (height, width) images, as MNIST-like data comes, trains with model=cnn."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    x = (rng.normal(size=(300, 8, 8)) + y[:, None, None]).astype(np.float32)
    np.savez(tmp_path / "gray.npz", x=x, y=y)
    result = run_module(
        "train", *SHORT, "model=cnn", "data=files", f"data.source={tmp_path}/gray.npz",
        f"hydra.run.dir={tmp_path}/run",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert "input (8, 8), 3 classes" in result.stdout
    assert (tmp_path / "run" / "metrics.json").is_file()


@pytest.mark.slow
def test_the_cnn_on_samples_that_are_not_images_stops_in_one_line(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "flat.npz", x=rng.normal(size=(300, 12)), y=rng.integers(0, 2, 300))
    result = run_module(
        "train", *SHORT, "model=cnn", "data=files", f"data.source={tmp_path}/flat.npz",
        f"hydra.run.dir={tmp_path}/run",
    )  # fmt: skip
    message = (
        "model=cnn takes images, samples of (channels, height, width) or (height, width); "
        "this data's samples are (12,): choose model=mlp"
    )
    assert_refused(result, message, tmp_path / "run")
