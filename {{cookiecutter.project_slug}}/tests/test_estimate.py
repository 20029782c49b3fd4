"""invoke estimate: the model (cloud/estimate.py) against numbers worked by hand, bad flags
answered in one line before anything is profiled, and (slow) the whole command as a user types
it: the run profiled here, the table with the cheapest and the fastest marked, and the profile
kept for `invoke train --dry-run`'s estimate row."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from conftest import invoke_cli, project_env

from cloud import estimate as model
from cloud import machines

PROFILE = model.Profile(
    step_s={1: 0.010, 2: 0.006},  # Amdahl: 80% parallel
    half_batch_step_s=0.006,  # 2 ms fixed, 0.125 ms a sample
    batch=64,
    batch_is_global=False,
    train_samples=6400,
    epochs=10,
    batches_limit=None,
    accumulate=1,
    parameters=1_000_000,
    sample_bytes=3144,
    from_bucket=False,
    cache_gb=None,
    local_all_reduce_s=0.002,
    host_cores=2,
)


def where(nodes: int, cores: int = 8, gbps: float | None = 10.0, price: float = 1.0):
    return model.Candidate("aws", "m", nodes, cores, gbps, price)


def test_compute_passes_through_what_was_measured_and_follows_amdahl_beyond() -> None:
    assert model.parallel_fraction(PROFILE) == pytest.approx(0.8)
    assert model.compute_s(PROFILE, 1, 64) == pytest.approx(0.010)
    assert model.compute_s(PROFILE, 2, 64) == pytest.approx(0.006)
    assert model.compute_s(PROFILE, 1, 32) == pytest.approx(0.006)
    assert model.compute_s(PROFILE, 8, 64) == pytest.approx(0.010 * (0.2 + 0.8 / 8))
    one = dataclasses.replace(PROFILE, step_s={1: 0.010})
    assert model.compute_s(one, 64, 64) == pytest.approx(0.010), "one thread says no speed-up"


def test_nodes_add_a_ring_all_reduce_over_the_network() -> None:
    assert model.all_reduce_s(PROFILE, where(1)) == 0
    # 4 nodes: 2*3/4 of 4 MB over 10 Gbps, and 6 messages of 50 us.
    assert model.all_reduce_s(PROFILE, where(4)) == pytest.approx(1.5 * 4e6 / 1.25e9 + 6 * 50e-6)
    local = model.local(PROFILE.host_cores, 2)
    assert (local.cores, model.all_reduce_s(PROFILE, local)) == (1, pytest.approx(0.002))
    with pytest.raises(model.EstimateError, match="this machine has 2 cores"):
        model.local(PROFILE.host_cores, 3)


def test_what_two_processes_took_beyond_compute_and_bytes_is_paid_n_minus_1_times() -> None:
    # Two processes of a thread each, a batch of 64 each: 10 ms of compute, 2 ms of bytes.
    paired = dataclasses.replace(PROFILE, pair_step_s=0.015)
    assert model.coordination_s(paired) == pytest.approx(0.003)
    assert model.all_reduce_s(paired, model.local(paired.host_cores, 2)) == pytest.approx(0.005)
    bytes_and_latency = model.all_reduce_s(PROFILE, where(4))
    assert model.all_reduce_s(paired, where(4)) == pytest.approx(bytes_and_latency + 3 * 0.003)
    # Where the batch is the step's, each of the two computed 32 samples (6 ms).
    tf = dataclasses.replace(paired, batch_is_global=True)
    assert model.coordination_s(tf) == pytest.approx(0.015 - 0.006 - 0.002)
    quick = dataclasses.replace(PROFILE, pair_step_s=0.001)  # faster than its parts: no cost
    assert model.coordination_s(quick) == 0


def test_the_whole_run_follows_each_frameworks_batch() -> None:
    one = model.estimate(PROFILE, where(1))
    assert one.steps == 1000 and one.seconds == pytest.approx(1000 * 0.003)
    assert one.cost == pytest.approx(one.seconds / 3600)
    four = model.estimate(PROFILE, where(4, price=2.0))  # each rank's batch of 64: 25 steps
    assert four.steps == 250
    assert four.step_s == pytest.approx(0.003 + model.all_reduce_s(PROFILE, where(4)))
    assert four.cost == pytest.approx(4 * 2.0 * four.seconds / 3600)
    tf = dataclasses.replace(PROFILE, batch_is_global=True)  # 16 a worker, 100 steps an epoch
    split = model.estimate(tf, where(4))
    assert split.steps == 1000
    assert split.step_s == pytest.approx((0.002 + 16 * 0.000125) * 0.3 + four.reduce_s)


def test_a_bucket_read_slower_than_the_steps_counts_once_cached_every_epoch_if_not() -> None:
    slow = where(1, gbps=0.1)  # 20.1 MB an epoch at 12.5 MB/s: 1.6 s against 0.3 s of steps
    read = 6400 * 3144 / 12.5e6
    cached = model.estimate(dataclasses.replace(PROFILE, from_bucket=True, cache_gb=20), slow)
    assert cached.read_s == pytest.approx(read - 0.3)
    streamed = model.estimate(dataclasses.replace(PROFILE, from_bucket=True, cache_gb=0.001), slow)
    assert streamed.read_s == pytest.approx(10 * (read - 0.3))
    assert model.estimate(PROFILE, slow).read_s == 0, "data in memory: nothing to read"


def test_marks_and_the_catalogs_network_figures() -> None:
    runs = [model.estimate(PROFILE, where(n, price=p)) for n, p in [(1, 1.0), (4, 0.1), (2, 9)]]
    fastest = min(range(3), key=lambda i: runs[i].seconds)
    cheapest = min(range(3), key=lambda i: runs[i].cost or 0)
    marked = model.marks(runs)
    assert "fastest" in marked[fastest] and "cheapest" in marked[cheapest]
    assert len(marked) == len({fastest, cheapest})
    assert model.network_gbps("Up to 12.5 Gbps") == 12.5 and model.network_gbps("") is None
    for offer in machines.rows():
        assert model.network_gbps(offer.network), offer


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
