"""invoke estimate on this project's training (its flags and its model are tested in the cloudgpu
package): the run profiled here, the table with the cheapest and the fastest marked, and the
profile kept for `invoke train --dry-run`'s estimate row."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cloudgpu import estimate as model
from cloudgpu import machines
from conftest import invoke_cli, project_env


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
