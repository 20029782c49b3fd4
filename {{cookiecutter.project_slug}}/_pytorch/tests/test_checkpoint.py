"""Checkpoint files survive crashes in the middle of a save."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import kill_mid_save

from {{ cookiecutter.package_name }}.training import checkpoint, storage


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
