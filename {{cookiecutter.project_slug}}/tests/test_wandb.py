"""Weights & Biases: never a prompt or a hang, and the API key never lands in the run folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import invoke_cli, project_env, run_module

FAKE_KEY = "0123456789abcdef0123456789abcdef01234567"


def wandb_env(home: Path, **extra: str) -> dict[str, str]:
    env = project_env(HOME=str(home), **extra)
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        env.pop(name, None)
    env.update(extra)
    return env


def offline_run(run_dir: Path) -> Path:
    runs = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((run_dir / "wandb").iterdir())
    return runs[0]


@pytest.mark.slow
def test_no_api_key_falls_back_to_offline(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_module(
        "train", "debug=fast", "logger=wandb", f"hydra.run.dir={run_dir}",
        env=wandb_env(tmp_path), timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert "no API key" in result.stdout and "logging offline" in result.stdout
    # wandb's banner and footer stay quiet; the run's summary, last, says how to upload it.
    assert not [line for line in result.stdout.splitlines() if line.startswith("wandb:")]
    last = result.stdout.rstrip().splitlines()[-1].split()
    assert last[:5] == ["wandb", "offline;", "upload", "with:", "wandb"] and last[5] == "sync"
    assert Path(last[6]) == offline_run(run_dir)
    # The offline log is protobuf records; its keys are stored as plain bytes.
    (records,) = offline_run(run_dir).glob("run-*.wandb")
    data = records.read_bytes()
    assert b"optimized_metric" in data  # the resolved config
    assert b"test/accuracy" in data  # the final summary (test metrics are logged nowhere else)


@pytest.mark.slow
def test_unreachable_server_falls_back_and_hides_the_key(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = wandb_env(tmp_path, WANDB_API_KEY=FAKE_KEY, WANDB_BASE_URL="http://127.0.0.1:9")
    result = run_module(
        "train", "debug=fast", "logger=wandb", "logger.wandb.init_timeout=5",
        f"hydra.run.dir={run_dir}", env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert "cannot reach the server" in result.stdout
    offline_run(run_dir)
    assert FAKE_KEY not in result.stdout
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert FAKE_KEY.encode() not in path.read_bytes(), path


@pytest.mark.slow
def test_wandb_s_own_lines_come_back_when_asked_for(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_module(
        "train", "debug=fast", "logger=wandb", "logger.wandb.silent=false",
        f"hydra.run.dir={run_dir}", env=wandb_env(tmp_path), timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout
    assert any(line.startswith("wandb: ") for line in result.stdout.splitlines())
    assert "  wandb " in result.stdout.rstrip().splitlines()[-1]  # the summary still ends it


def test_a_bad_wandb_mode_stops_before_the_run(tmp_path: Path) -> None:
    result = run_module(
        "train", "debug=fast", "logger=wandb", "logger.wandb.mode=sometimes",
        f"hydra.run.dir={tmp_path}/run", env=wandb_env(tmp_path),
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stdout.strip() == (
        "error: logger.wandb.mode=sometimes must be one of online, offline, disabled"
    )
    assert not (tmp_path / "run").exists()


def test_a_cloud_run_says_when_this_shells_api_key_will_not_reach_it(tmp_path: Path) -> None:
    """A VM never gets this machine's environment: a WANDB_API_KEY set here but not named under
    [secrets] is said before launch, with how to add it; named there, nothing is said."""
    settings = tmp_path / "cloud.toml"
    base = ["train", "--cloud=aws", "--gpu=t4", f"--image=r@sha256:{'1' * 64}", "--dry-run"]
    env = wandb_env(tmp_path, CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"),
                    WANDB_API_KEY=FAKE_KEY)  # fmt: skip
    settings.write_text("")
    done = invoke_cli(*base, env=env)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "WANDB_API_KEY" in line]
    assert line.startswith("warning: WANDB_API_KEY is set here but will not reach the run, whose")
    assert "under [secrets] in cloud.toml" in line and FAKE_KEY not in done.stdout + done.stderr
    assert "WANDB_API_KEY" not in invoke_cli(*base, "--", "logger=jsonl", env=env).stderr
    settings.write_text('[secrets]\nWANDB_API_KEY = "wandb-api-key"\n')
    assert "warning" not in invoke_cli(*base, env=env).stderr


def test_each_cloud_run_gets_its_own_wandb_run_at_the_same_fixed_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every cloud VM and job trains in the same fixed folder (/outputs/run on SkyPilot): two
    cloud runs there log two wandb runs, and a resume of one (the same RUN_ID) continues its own."""
    from {{ cookiecutter.package_name }}.tracking import wandb_tracker

    monkeypatch.setenv("HOME", str(tmp_path))
    folder = tmp_path / "outputs" / "run"
    folder.mkdir(parents=True)
    ids = []
    one, another = "proj-261201-000000-aaaa", "proj-261201-000100-bbbb"
    for cloud_run in (one, another, one):
        monkeypatch.setenv("RUN_ID", cloud_run)
        tracker = wandb_tracker.start(folder, {}, mode="offline")
        ids.append(tracker.run.id)
        tracker.finish(0)
    first, second, resumed = ids
    assert first != second and resumed == first
    monkeypatch.delenv("RUN_ID")
    assert wandb_tracker.run_id(folder) == wandb_tracker.run_id(folder) != first  # a local run
