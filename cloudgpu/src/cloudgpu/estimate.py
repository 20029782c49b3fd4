"""How long a run takes, and what it costs, on N machines of a type: `invoke estimate`'s model,
fed by a profile of the run taken on this machine (tasks/estimate.py).

The model, which `ASSUMPTIONS` prints under every table:
- a step's compute is a fixed part plus a part per sample (two batch sizes measured at one
  thread), spread over threads by Amdahl's law (its parallel part from 1 and 2+ threads), one
  thread a physical core, each core as fast as one of this machine's;
- data parallel over nodes: each node computes its share of the step's batch, then the nodes
  all-reduce the gradients in a ring, 2(N-1)/N of their bytes over the machine's network, not
  overlapped with compute (an upper bound), with a fixed latency a message; and each step pays
  N-1 times the coordination that two data-parallel processes of this machine paid beyond
  their compute and bytes (the framework's collectives, waiting for the slower process);
- data in a bucket is read over the same network while the step runs (prefetched): an epoch
  takes the longer of the two; a shard cache that holds a node's share is read once;
- the run trains every epoch of trainer.max_epochs (early stopping can only shorten it);
  validation, the test pass, start-up (VM boot, image pull) and checkpoints are not counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .catalog import Offer

MESSAGE_LATENCY_S = 50e-6  # one message between two VMs of a region: an assumption, not measured
ASSUMPTIONS = (
    "compute: a fixed part and a part per sample (measured at two batch sizes), over threads "
    "by Amdahl's law fitted to the threads measured; one thread a physical core, each as fast "
    "as this machine's",
    "nodes: data parallel; a ring all-reduce of the gradients over the machine's network "
    "(the catalog's figure; 'up to' is a burst rate), not overlapped with compute, "
    f"{MESSAGE_LATENCY_S * 1e6:.0f} us a message (assumed), plus N-1 times the coordination "
    "two data-parallel processes took here beyond their compute and bytes",
    "data in a bucket: read over the same network while the steps run; a cache that holds a "
    "node's share is read once",
    "every epoch of trainer.max_epochs; validation, test, checkpoints and start-up (VM boot, "
    "image pull) not counted",
)


class EstimateError(ValueError):
    """A profile or candidate the model cannot use; the message says why."""


@dataclass(frozen=True)
class Profile:
    """What the run did on this machine, and what the whole run is (tasks/estimate.py)."""

    step_s: dict[int, float]  # seconds an optimizer step (all its micro-batches) at T threads
    half_batch_step_s: float  # at one thread and batch // 2
    batch: int  # data.batch_size: each process's, or the whole step's where batch_is_global
    batch_is_global: bool
    train_samples: int
    epochs: int  # trainer.max_epochs
    batches_limit: int | None  # trainer.limit_train_batches
    accumulate: int  # trainer.accumulate_grad_batches
    parameters: int
    sample_bytes: int  # one training sample as the loader reads it
    from_bucket: bool
    cache_gb: float | None  # data=shards' local cache; None: the data is read once
    local_all_reduce_s: float  # the gradients' bytes swapped between two local endpoints
    host_cores: int  # this machine's cores
    # A step of two data-parallel processes here, a thread each, each its share of the batch:
    # None where this machine has one core.
    pair_step_s: float | None = None

    @classmethod
    def from_json(cls, fields: dict) -> Profile:
        """A profile as saved (dataclasses.asdict, through JSON: the thread counts are text)."""
        return cls(**{**fields, "step_s": {int(k): float(v) for k, v in fields["step_s"].items()}})

    @property
    def gradient_bytes(self) -> int:
        return 4 * self.parameters  # float32 gradients


@dataclass(frozen=True)
class Candidate:
    """Where to estimate: `nodes` machines of `cores` physical cores each."""

    cloud: str  # aws, gcp, azure, or local (this machine's cores shared by the nodes)
    machine: str
    nodes: int
    cores: int
    network_gbps: float | None  # None: local nodes, whose all-reduce the profile measured
    price_per_hour: float | None  # one machine's; None: local

    @property
    def network_bytes_per_s(self) -> float:
        assert self.network_gbps is not None
        return self.network_gbps * 1e9 / 8


@dataclass(frozen=True)
class Estimate:
    candidate: Candidate
    step_s: float  # one optimizer step: compute and all-reduce
    reduce_s: float  # of which the all-reduce
    steps: int  # optimizer steps of the whole run
    read_s: float  # seconds reading the bucket that steps do not hide
    seconds: float

    @property
    def cost(self) -> float | None:
        price = self.candidate.price_per_hour
        return None if price is None else price * self.candidate.nodes * self.seconds / 3600

    @property
    def steps_per_second(self) -> float:
        return 1.0 / self.step_s


def candidate(offer: Offer, nodes: int, spot: bool) -> Candidate:
    return Candidate(
        cloud=offer.cloud,
        machine=offer.machine,
        nodes=nodes,
        cores=offer.cores,
        network_gbps=network_gbps(offer.network),
        price_per_hour=offer.price(spot),
    )


def local(cores: int, nodes: int) -> Candidate:
    """`nodes` containers on this machine of `cores` cores, its cores shared between them."""
    if nodes > cores:
        raise EstimateError(f"--nodes {nodes}: this machine has {cores} cores, one at least a node")
    return Candidate("local", "this machine", nodes, cores // nodes, None, None)


def network_gbps(text: str) -> float | None:
    """`"Up to 12.5 Gbps"` -> 12.5; None when the catalog gives no figure."""
    found = re.search(r"([\d.]+)\s*Gbps", text or "")
    return float(found[1]) if found else None


def parallel_fraction(profile: Profile) -> float:
    """Amdahl's parallel part from one thread and the most threads measured."""
    most = max(profile.step_s)
    if most == 1:
        return 0.0  # one thread measured: nothing said about more, so no speed-up is assumed
    ratio = profile.step_s[most] / profile.step_s[1]
    return min(1.0, max(0.0, (1 - ratio) / (1 - 1 / most)))


def compute_s(profile: Profile, threads: int, batch: float) -> float:
    """One optimizer step's compute at `threads` threads on a batch of `batch` samples."""
    full, half = profile.step_s[1], profile.half_batch_step_s
    per_sample = max(0.0, (full - half) / (profile.batch - profile.batch // 2))
    fixed = full - per_sample * profile.batch
    if fixed < 0:  # half the batch more than twice as fast (caches): all of it per sample
        fixed, per_sample = 0.0, full / profile.batch
    one_thread = fixed + per_sample * batch
    p = parallel_fraction(profile)
    return one_thread * ((1 - p) + p / threads)


def coordination_s(profile: Profile) -> float:
    """What a step of two data-parallel processes here took beyond its compute and its bytes:
    the framework's collectives (their count and latency, the step's other reductions) and the
    wait for the slower process."""
    if profile.pair_step_s is None:
        return 0.0
    node_batch = profile.batch / 2 if profile.batch_is_global else profile.batch
    alone = compute_s(profile, 1, node_batch) + profile.local_all_reduce_s
    return max(0.0, profile.pair_step_s - alone)


def all_reduce_s(profile: Profile, where: Candidate) -> float:
    """What `where.nodes` nodes add to a step: a ring all-reduce of the gradients and the
    coordination measured here for two, N-1 times over for N."""
    n = where.nodes
    if n == 1:
        return 0.0
    ring = 2 * (n - 1) / n  # of the gradient's bytes, each node sends and receives
    if where.network_gbps is None:  # local: the bytes as swapped here (a ring of two moves 1x)
        moved = profile.local_all_reduce_s * ring
    else:
        moved = ring * profile.gradient_bytes / where.network_bytes_per_s
        moved += 2 * (n - 1) * MESSAGE_LATENCY_S
    return moved + (n - 1) * coordination_s(profile)


def estimate(profile: Profile, where: Candidate) -> Estimate:
    n = where.nodes
    node_batch = profile.batch / n if profile.batch_is_global else profile.batch
    step_batch = profile.batch if profile.batch_is_global else profile.batch * n
    batches = math.ceil(profile.train_samples / step_batch)
    if profile.batches_limit:
        batches = min(batches, profile.batches_limit)
    steps_per_epoch = math.ceil(batches / profile.accumulate)
    reduce = all_reduce_s(profile, where)
    step = compute_s(profile, max(1, where.cores), node_batch) + reduce
    epoch = steps_per_epoch * step
    read_epochs, read = _bucket_reads(profile, where, steps_per_epoch * step_batch)
    hidden = read_epochs * max(0.0, read - epoch)
    return Estimate(
        candidate=where,
        step_s=step,
        reduce_s=reduce,
        steps=steps_per_epoch * profile.epochs,
        read_s=hidden,
        seconds=profile.epochs * epoch + hidden,
    )


def _bucket_reads(profile: Profile, where: Candidate, samples: int) -> tuple[int, float]:
    """How many epochs read the bucket, and the seconds one such read takes a node."""
    if not profile.from_bucket or where.network_gbps is None:
        return 0, 0.0
    share = samples * profile.sample_bytes / where.nodes
    cached = profile.cache_gb is None or share <= profile.cache_gb * 1e9
    return (1 if cached else profile.epochs), share / where.network_bytes_per_s


def marks(estimates: list[Estimate]) -> dict[int, str]:
    """The cheapest and the fastest of `estimates`, by index."""
    marked: dict[int, list[str]] = {}
    priced = [i for i, e in enumerate(estimates) if e.cost is not None]
    if priced:
        marked.setdefault(min(priced, key=lambda i: estimates[i].cost or 0.0), []).append(
            "cheapest"
        )
    if estimates:
        fastest = min(range(len(estimates)), key=lambda i: estimates[i].seconds)
        marked.setdefault(fastest, []).append("fastest")
    return {i: ", ".join(words) for i, words in marked.items()}


def duration(seconds: float) -> str:
    """`4h05`, or `42s` under a minute."""
    minutes = round(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}" if minutes >= 1 else f"{seconds:.0f}s"


def dollars(cost: float | None) -> str:
    if cost is None:
        return "-"
    return f"{cost:.2f}" if cost >= 0.01 else "<0.01"
