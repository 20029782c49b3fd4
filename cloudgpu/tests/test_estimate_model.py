"""The estimate model (estimate.py) against numbers worked by hand: Amdahl within a machine, a
ring all-reduce between nodes, what two processes pay to coordinate, the bucket's reads, and the
marks of the fastest and the cheapest."""

from __future__ import annotations

import dataclasses

import pytest

from cloudgpu import estimate as model
from cloudgpu import machines

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
