"""invoke estimate (its model, cloudgpu's estimate.py, is tested in that package): bad flags
answered in one line before anything is profiled, and (slow) the whole command as a user types
it: the run profiled here, the table with the cheapest and the fastest marked, and the profile
kept for `invoke train --dry-run`'s estimate row."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cloudgpu import estimate as model
from cloudgpu import machines
from conftest import invoke_cli, project_env


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes=0"], "--nodes must be at least 1"),
        (["--nodes=1,x"], "--nodes 'x' is not a whole number"),
        (["--cloud=mars"], "--cloud 'mars': choose from aws, gcp, azure, local, or all"),
        (["--gpu=t4"], "--gpu t4: a GPU's speed cannot be read from this machine's CPU"),
        (["--cloud=aws", "--machine=c7i.9xlarge"], "did you mean c7i."),
        (["--cloud=aws", "--machine=g4dn.xlarge"], "a GPU machine; estimates are for CPU"),
        (["--cloud=gcp", "--cpus=100000"], "no machine of gcp has 100000+ vCPUs"),
        (["--cloud=local", "--nodes=1,1000"], "local nodes share this machine's"),
        (["--threads=1000"], "--threads 1000: this machine has"),
    ],
)
def test_bad_flags_are_one_line_before_anything_is_profiled(
    args: list[str], message: str, tmp_path: Path
) -> None:
    done = invoke_cli("estimate", *args, env=project_env(ESTIMATE_PROFILES=str(tmp_path)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "profiling" not in done.stdout and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_estimate_profiles_the_run_and_the_dry_run_shows_its_estimate(tmp_path: Path) -> None:
    env = project_env(
        ESTIMATE_PROFILES=str(tmp_path / "profiles"),
        CLOUD_RUNS=str(tmp_path / "runs"),
        CLOUD_SETTINGS=str(tmp_path / "none"),
    )
    overrides = ["--", "trainer.max_epochs=4"]
    args = ["--cloud=aws,local", "--cpus=8", "--nodes=1,2", "--threads=1"]
    done = invoke_cli("estimate", *args, *overrides, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout.split("profile here:")[0]
    rows = re.findall(r"^(aws|local)\s+(this machine|\S+)\s+(\d+)\s", table, re.MULTILINE)
    assert {(cloud, nodes) for cloud, _, nodes in rows} == {
        ("aws", "1"),
        ("aws", "2"),
        ("local", "1"),
        ("local", "2"),
    }, table
    assert sum("cheapest" in line for line in table.splitlines()) == 1
    assert sum("fastest" in line for line in table.splitlines()) == 1
    (kept,) = (tmp_path / "profiles").iterdir()
    record = json.loads(kept.read_text())
    assert record["overrides"] == ["trainer.max_epochs=4"]
    profile = record["profile"]
    assert profile["epochs"] == 4 and profile["parameters"] > 0 and profile["step_s"]["1"] > 0
    assert re.search(r"profile here: [\d.]+ at 1 thread steps/s", done.stdout)
    planned = invoke_cli("train", "--cloud=aws", "--machine=c7i.2xlarge", "--dry-run",
                         "--image=r@sha256:" + "4" * 64, *overrides, env=env)  # fmt: skip
    assert planned.returncode == 0, planned.stdout[-3000:] + planned.stderr[-3000:]
    offer = machines.named("aws", "c7i.2xlarge")
    found = model.Profile.from_json(profile)
    expected = model.estimate(found, model.candidate(offer, 1, False))
    line = re.search(r"estimate\s+about (\S+), \$(\S+) for ([\d,]+) steps", planned.stdout)
    assert line, planned.stdout
    assert line[1] == model.duration(expected.seconds)
    assert int(line[3].replace(",", "")) == expected.steps
