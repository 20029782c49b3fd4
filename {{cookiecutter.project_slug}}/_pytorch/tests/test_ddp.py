"""DDP under torchrun: two CPU processes with the gloo backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PACKAGE, PROJECT_ROOT, SHORT, project_env, read_metrics
from helpers.datasets import numbered_shards

from {{ cookiecutter.package_name }}.data.shards.index import Index
from {{ cookiecutter.package_name }}.training import checkpoint


def torchrun(
    run_dir: Path | None,
    *overrides: str,
    cwd: Path = PROJECT_ROOT,
    script: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        *(script or ["-m", f"{PACKAGE}.train"]), *SHORT, *overrides,
    ]  # fmt: skip
    if run_dir is not None:
        command.append(f"hydra.run.dir={run_dir}")
    return subprocess.run(
        command, cwd=cwd, env=env or project_env(), capture_output=True, text=True, timeout=600
    )


# How often the ranks vote on stopping: never within these runs, and every 5 steps.
STOP_CHECKS = (1000, 5)


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Two DDP runs of two ranks under torch's profiler, one for each of STOP_CHECKS: each
    folder holds the run (run/) and each rank's count of collectives (<rank>.json)."""
    folders = {}
    for every in STOP_CHECKS:
        out = folders[every] = tmp_path_factory.mktemp(f"every-{every}")
        done = torchrun(
            out / "run",
            f"trainer.stop_check_every_n_steps={every}",
            script=[str(PROJECT_ROOT / "tests" / "helpers" / "collectives.py")],
            env=project_env(COLLECTIVES_OUT=str(out)),
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return folders


@pytest.mark.slow
def test_two_process_ddp_trains_and_only_rank_zero_writes(counted: dict[int, Path]) -> None:
    run = counted[STOP_CHECKS[0]] / "run"
    log = (run / "debug.log").read_text()
    assert "DDP: rank 0 of 2" in log and "rank 1" not in log
    assert read_metrics(run)["epochs"] == 3
    state = checkpoint.load(run / "checkpoints" / checkpoint.LAST)
    # Each rank sees half of each epoch: 5 capped batches per rank and epoch, 3 epochs.
    assert state["progress"]["global_step"] == 15
    assert sorted(p.name for p in run.iterdir()) == sorted(
        [".hydra", "checkpoints", "config.yaml", "debug.log", "metrics.json", "metrics.jsonl"]
    )


@pytest.mark.slow
def test_ddp_without_a_run_dir_makes_one_folder(tmp_path: Path) -> None:
    """Rank 1 must not create a timestamped folder of its own."""
    result = torchrun(None, f"paths.root_dir={tmp_path}", "debug=fast")
    assert result.returncode == 0, result.stdout + result.stderr
    runs = list((tmp_path / "outputs" / "debug").iterdir())
    assert len(runs) == 1 and (runs[0] / "metrics.json").is_file()


@pytest.mark.slow
def test_a_ddp_step_runs_one_collective_and_stop_votes_come_every_n_steps(
    counted: dict[int, Path],
) -> None:
    """Counted by torch's profiler on both ranks: 3 epochs of 5 steps (15), one validation each."""
    counts = {}
    for every, out in counted.items():
        ranks = [json.loads((out / f"{rank}.json").read_text()) for rank in (0, 1)]
        assert ranks[0] == ranks[1], "both ranks run the same collectives"
        counts[every] = ranks[0].get("all_reduce", 0)
    steps, epochs = 15, 3
    # DDP's one gradient bucket per step, and one all-reduce per validation: nothing else.
    assert counts[1000] == steps + epochs, counts
    # The stop vote: one all-reduce every 5 steps, not one every step.
    assert counts[5] - counts[1000] == steps // 5, counts


@pytest.mark.slow
def test_two_ddp_ranks_train_on_disjoint_samples_whose_union_is_the_epoch(tmp_path: Path) -> None:
    """Streamed shards with two loader workers per rank: each epoch, the ranks' samples do not
    overlap and together are the epoch (less the remainder a rank count leaves, dropped so that
    ranks step in lockstep), in an order that changes with the epoch."""
    source = numbered_shards(tmp_path)
    train_size = sum(shard.rows for shard in Index.read(str(source)).splits["train"])
    done = torchrun(
        tmp_path / "run",
        "data=shards", f"data.source={source}", "data.num_workers=2", "data.batch_size=4",
        "model=mlp", "trainer.limit_train_batches=null", "trainer.max_epochs=2",
        script=[str(PROJECT_ROOT / "tests" / "helpers" / "seen_samples.py")],
        env=project_env(SEEN_OUT=str(tmp_path)),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    ranks = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    for epoch in ("0", "1"):
        zero, one = ranks[0][epoch], ranks[1][epoch]
        assert len(zero) == len(one) == train_size // 2
        assert set(zero).isdisjoint(one)
        assert len(set(zero) | set(one)) == train_size // 2 * 2
        assert set(zero) | set(one) <= set(range(203))
    assert ranks[0]["0"] != ranks[0]["1"], "a new order each epoch"
