"""This project's framework provides what contract.py says the entry points need."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
from conftest import CONFIG_DIR, SHORT
from hydra import compose, initialize_config_dir

from {{ cookiecutter.package_name }}.config import schema
from {{ cookiecutter.package_name }}.data.sources import load_splits
from {{ cookiecutter.package_name }}.tracking import trackers
from {{ cookiecutter.package_name }}.training import (
    checkpoint,
    contract,
    fit,
    loop,
    runtime,
    scoring,
)

MODULES = [(runtime, contract.RuntimeModule), (checkpoint, contract.CheckpointModule),
           (scoring, contract.ScoringModule)]  # fmt: skip


def members(protocol: type) -> dict[str, Any]:
    """The names a protocol declares, with their declared values (functions or annotations)."""
    declared = {n: v for n, v in vars(protocol).items() if not n.startswith("_")}
    return declared | dict.fromkeys(protocol.__annotations__)


@pytest.mark.parametrize(("module", "protocol"), MODULES, ids=lambda m: getattr(m, "__name__", m))
def test_each_module_has_what_the_contract_names(module: Any, protocol: type) -> None:
    for name, declared in members(protocol).items():
        assert hasattr(module, name), f"{module.__name__} lacks {name}"
        if inspect.isfunction(declared):
            wanted = list(inspect.signature(declared).parameters)[1:]  # without self
            given = list(inspect.signature(getattr(module, name)).parameters)
            assert given[: len(wanted)] == wanted, f"{module.__name__}.{name}{tuple(given)}"


def test_a_trainer_built_as_fit_builds_it_keeps_the_protocol(tmp_path: Path) -> None:
    assert list(inspect.signature(loop.Trainer).parameters) == [
        "parts", "runtime", "tracker", "checkpoint_dir",
    ]  # fmt: skip
    schema.register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=SHORT)
    data = cfg.data
    splits = load_splits(data.source, data.val_fraction, data.test_fraction, data.split_seed)
    rt = runtime.start("cpu")
    tracker = trackers.start(tmp_path, {}, {}, enabled=False)
    trainer = loop.Trainer(fit.parts(cfg, splits, {}), rt, tracker, tmp_path / "checkpoints")
    assert isinstance(trainer, contract.Trainer) and isinstance(rt, contract.Runtime)
    assert trainer.epochs_done == 0 and trainer.parameter_count > 0
    runtime.stop(rt)
