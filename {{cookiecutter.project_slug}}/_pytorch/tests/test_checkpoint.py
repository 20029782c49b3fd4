"""Checkpoint files survive crashes in the middle of a save, load with weights_only, and resume
on another device than they were written on."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from conftest import CONFIG_DIR, SHORT, kill_mid_save
from hydra import compose, initialize_config_dir

from {{ cookiecutter.package_name }}.config.schema import register
from {{ cookiecutter.package_name }}.data import sources
from {{ cookiecutter.package_name }}.tracking import trackers
from {{ cookiecutter.package_name }}.training import checkpoint, fit, runtime, storage
from {{ cookiecutter.package_name }}.training.loop import Trainer

register()


class ExplodesWhenPickled:
    def __reduce__(self) -> tuple:
        raise RuntimeError("disk full")


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.LAST
    checkpoint.save({"step": 1, "weights": torch.ones(3)}, path)
    with pytest.raises(RuntimeError, match="disk full"):
        checkpoint.save({"step": 2, "weights": torch.zeros(3), "bad": ExplodesWhenPickled()}, path)
    assert checkpoint.load(path)["step"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [checkpoint.LAST]  # no temp file left


def test_process_killed_mid_save_leaves_a_readable_checkpoint(tmp_path: Path) -> None:
    """SIGKILL a process that saves a large checkpoint over and over: the file always loads."""
    path = tmp_path / checkpoint.LAST
    script = (
        "import itertools, sys, torch\n"
        "from {{ cookiecutter.package_name }}.training import checkpoint\n"
        "from pathlib import Path\n"
        "blob = torch.randn(4_000_000)\n"
        "for step in itertools.count():\n"
        "    checkpoint.save({'step': step, 'blob': blob}, Path(sys.argv[1]))\n"
        "    print(step, flush=True)\n"
    )
    kill_mid_save(script, path)
    state = checkpoint.load(path)
    assert state["step"] >= 2 and state["blob"].numel() == 4_000_000


def test_background_save_snapshots_the_state(tmp_path: Path) -> None:
    """Training may change the weights right after `save` returns; the file has the old ones."""
    saver = checkpoint.BackgroundSaver()
    weights = torch.ones(1_000_000)
    saver.save({"weights": weights}, tmp_path / checkpoint.LAST)
    weights.zero_()
    saver.close()
    saved = checkpoint.load(tmp_path / checkpoint.LAST)["weights"]
    assert torch.equal(saved, torch.ones(1_000_000))


def test_background_save_error_reaches_the_caller(tmp_path: Path) -> None:
    saver = checkpoint.BackgroundSaver()
    saver.save({"bad": ExplodesWhenPickled()}, tmp_path / checkpoint.LAST)
    with pytest.raises(RuntimeError, match="disk full"):
        saver.wait()
    assert not (tmp_path / checkpoint.LAST).exists()


def test_resolve_finds_checkpoints_in_a_run_directory(tmp_path: Path) -> None:
    checkpoint.save({"x": 1}, tmp_path / "checkpoints" / checkpoint.BEST)
    found = storage.resolve(tmp_path, checkpoint.BEST)
    assert found == tmp_path / "checkpoints" / checkpoint.BEST
    with pytest.raises(FileNotFoundError, match=r"last\.pt"):
        storage.resolve(tmp_path, checkpoint.LAST)


# load_state_dict into meta tensors copies nothing (and says so): here only where they go counts.
@pytest.mark.filterwarnings("ignore:for .*copying from a non-meta parameter")
def test_a_checkpoint_resumes_on_another_device(short_run: Path) -> None:
    """A GPU resume, shown on the `meta` device: the checkpoint loads onto the CPU, the model's
    and optimizer's tensors go where the model is (the optimizer's step counters stay on the
    CPU, where AdamW reads them without a sync), and the RNG states come back as they were."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=list(SHORT))
    splits = sources.load(cfg.data)
    device = dataclasses.replace(runtime.start("cpu"), device=torch.device("meta"))
    trainer = Trainer(fit.parts(cfg, splits, {}), device, trackers.start(short_run, {}, {},
                      enabled=False), short_run / "elsewhere")  # fmt: skip
    trainer.scheduler = trainer.make_scheduler(trainer.optimizer, total_steps=100)
    last = short_run / "checkpoints" / checkpoint.LAST
    saved = checkpoint.load(last)
    tensors = [t for t in _leaves(saved) if isinstance(t, torch.Tensor)]
    assert tensors and {t.device.type for t in tensors} == {"cpu"}
    trainer._restore(last)
    moments = [s for s in trainer.optimizer.state.values() if "exp_avg" in s]
    assert moments and all(s["exp_avg"].device.type == "meta" for s in moments)
    assert all(s["step"].device.type == "cpu" for s in moments)
    assert next(trainer.model.parameters()).device.type == "meta"
    assert torch.equal(torch.get_rng_state(), saved["rng"]["torch"])
    assert trainer.progress.global_step == saved["progress"]["global_step"] > 0


def _leaves(value: object) -> list[object]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list | tuple):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def test_checkpoints_load_with_weights_only(short_run: Path) -> None:
    """Nothing in a checkpoint needs the unpickler to run code: torch.load's weights_only."""
    for name in (checkpoint.LAST, checkpoint.BEST):
        state = torch.load(short_run / "checkpoints" / name, weights_only=True)
        assert state["num_classes"] == 10
