"""Every config composes and every `_target_` instantiates."""

from __future__ import annotations

import pytest
from conftest import CONFIG_DIR
from framework_parts import build
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from {{ cookiecutter.package_name }}.config.schema import register

register()

GROUPS = sorted(
    path.name for path in CONFIG_DIR.iterdir() if path.is_dir() and path.name != "hydra"
)


def options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONFIG_DIR / group).glob("*.yaml"))


def compose_train(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose("train", overrides=list(overrides))


def test_every_group_has_options() -> None:
    expected = {
        "callbacks", "data", "debug", "experiment", "hparams_search",
        "logger", "model", "optimizer", "paths", "scheduler", "trainer",
    }  # fmt: skip
    assert expected <= set(GROUPS)
    for group in GROUPS:
        assert options(group), f"configs/{group}/ is empty"


@pytest.mark.parametrize(
    "override",
    [f"{group}={name}" for group in GROUPS for name in options(group) if group != "data"]
    + ["data=digits", "data=files data.source=/tmp/x.npz"],
)
def test_option_composes_and_builds(override: str) -> None:
    cfg = compose_train(*override.split())
    assert cfg.trainer.max_epochs >= 1
    build(cfg)


def test_experiments_change_the_run() -> None:
    default = compose_train()
    for name in options("experiment"):
        cfg = compose_train(f"experiment={name}")
        assert cfg.tags != default.tags, f"experiment={name} should tag its runs"


def test_files_data_requires_a_source() -> None:
    cfg = compose_train("data=files")
    with pytest.raises(Exception, match="source"):
        _ = cfg.data.source


def test_crossval_and_evaluate_compose() -> None:
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        crossval = compose("crossval", overrides=["data.folds=3"])
        evaluate = compose("evaluate", overrides=["ckpt_path=somewhere", "split=val"])
    assert crossval.task_name == "crossval" and crossval.data.folds == 3
    assert evaluate.split == "val"
