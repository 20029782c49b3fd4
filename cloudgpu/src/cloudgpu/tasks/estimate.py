"""invoke estimate: out (more machines) or up (a bigger one), decided with numbers. The run is
profiled here (profiling.py), then cloudgpu/estimate.py's model gives each machine x node count of
the catalog the time and the cost of the whole run; the cheapest and the fastest are marked."""

from __future__ import annotations

from invoke import Context, Exit, task

from cloudgpu import catalog, machines
from cloudgpu import estimate as model

from . import profiling
from .args import override_args, whole_number
from .project import DEFAULT_CLOUD
from .remote import table

PLACES = (*catalog.CLOUDS, "local")


def _counts(flag: str, text: str) -> list[int]:
    """`--nodes 1,2,4` as [1, 2, 4]; exit 2 naming the flag otherwise."""
    parts = [part.strip() for part in str(text).split(",") if part.strip()]
    if not parts:
        raise Exit(f"error: {flag} {text!r}: give whole numbers, e.g. {flag} 1,2,4", 2)
    return sorted({whole_number(flag, part, 1) for part in parts})


def _places(text: str) -> list[str]:
    chosen = [p.strip() for p in text.split(",") if p.strip()] or [DEFAULT_CLOUD]
    chosen = list(catalog.CLOUDS) if chosen == ["all"] else chosen
    for place in chosen:
        if place not in PLACES:
            raise Exit(f"error: --cloud {place!r}: choose from {', '.join(PLACES)}, or all", 2)
    return chosen


def candidates(
    cores: int, places: list[str], nodes: list[int], cpus: int, memory: int, machine: str,
    spot: bool,
) -> list[model.Candidate]:  # fmt: skip
    """Each cloud's CPU machines of at least `cpus` vCPUs (or the one named), at each node count
    that keeps the whole within `cpus` x the most nodes: one big machine beside many small."""
    budget = cpus * max(nodes)
    chosen: list[model.Candidate] = []
    for place in places:
        if place == "local":
            chosen += [model.local(cores, n) for n in nodes]
            continue
        if machine:
            offer = machines.named(place, machine)
            if not offer.is_cpu:
                raise catalog.CatalogError(
                    f"--machine {machine}: a GPU machine; estimates are for CPU machines here"
                )
            chosen += [model.candidate(offer, n, spot) for n in nodes]
            continue
        for offer in machines.rows(place):
            if offer.vcpus < cpus or offer.memory_gib < memory or offer.price(spot) is None:
                continue
            chosen += [model.candidate(offer, n, spot) for n in nodes if offer.vcpus * n <= budget]
    return _cheapest_alike(chosen)


def _cheapest_alike(chosen: list[model.Candidate]) -> list[model.Candidate]:
    """One candidate per cloud, cores, network and node count: the model tells machines that
    differ only in memory (m7i, r7i) apart by price alone."""
    kept: dict[tuple, model.Candidate] = {}
    for where in chosen:
        alike = (where.cloud, where.cores, where.network_gbps, where.nodes)
        if alike not in kept or (where.price_per_hour or 0) < (kept[alike].price_per_hour or 0):
            kept[alike] = where
    return list(kept.values())


def show(estimates: list[model.Estimate], found: model.Profile, top: int, spot: bool) -> None:
    ranked = sorted(estimates, key=lambda e: e.seconds)
    marked = model.marks(ranked)
    shown = [i for i in range(len(ranked)) if i < top or i in marked]
    header = ["CLOUD", "MACHINE", "NODES", "THREADS", "STEP ms", "ALL-REDUCE ms", "TIME",
              "COST $", "$/h", ""]  # fmt: skip
    rows = [header]
    for i in shown:
        e = ranked[i]
        where = e.candidate
        price = where.price_per_hour
        rows.append([
            where.cloud, where.machine, str(where.nodes), f"{where.nodes} x {where.cores}",
            f"{e.step_s * 1000:.2f}", f"{e.reduce_s * 1000:.2f}", model.duration(e.seconds),
            model.dollars(e.cost),
            "-" if price is None else f"{price * where.nodes:.3f}", marked.get(i, ""),
        ])  # fmt: skip
    table(rows)
    if len(shown) < len(ranked):
        print(f"({len(ranked) - len(shown)} slower rows left out: --top {len(ranked)} shows all)")
    rates = ", ".join(f"{1 / s:.1f} at {t} thread{'s' * (t > 1)}" for t, s in found.step_s.items())
    print(
        f"\nprofile here: {rates} steps/s (batch {found.batch}), {1 / found.half_batch_step_s:.1f} "
        f"at batch {found.batch // 2}; {found.parameters:,} parameters "
        f"({found.gradient_bytes / 1e6:.1f} MB of gradients), "
        f"{found.local_all_reduce_s * 1000:.2f} ms to swap them between two local endpoints; "
        f"{found.train_samples:,} training samples, {found.epochs} epochs"
    )
    if found.pair_step_s is not None:
        print(
            f"two data-parallel processes of a thread each: {1 / found.pair_step_s:.1f} steps/s, "
            f"{model.coordination_s(found) * 1000:.2f} ms a step beyond their compute and bytes"
        )
    print(f"prices: {'spot' if spot else 'on-demand'}, from the catalog (invoke machines)")
    print("the model:")
    for line in model.ASSUMPTIONS:
        print(f"  - {line}")


@task(
    help={
        "cloud": f"aws, gcp, azure, local (this machine split into nodes), a list, or all "
        f"(default {DEFAULT_CLOUD})",
        "cpus": "machines of at least this many vCPUs; the node counts go up to the same whole "
        "as --cpus x the most nodes (default 4)",
        "memory": "machines of at least this many GiB of memory",
        "machine": "this CPU machine type only (invoke machines)",
        "nodes": "node counts to compare, e.g. 1,2,4,8 (default)",
        "spot": "at spot prices",
        "threads": "thread counts profiled here (default 1 and 2, as this machine has cores)",
        "top": "rows shown, fastest first (default 15; the cheapest is always shown)",
        "repeats": "profile runs at each setting, their median taken (default 1; more on a "
        "noisy machine)",
        "gpu": "GPU machines: not estimated from a CPU profile (the error says what to do)",
    }
)
def estimate(
    c: Context, cloud: str = "", cpus: str = "4", memory: str = "", machine: str = "",
    nodes: str = "1,2,4,8", spot: bool = False, threads: str = "", top: str = "15", gpu: str = "",
    repeats: str = "1",
) -> None:  # fmt: skip
    """Time and cost of the run (overrides after --) on each machine and node count.

    Profiled here, modeled for the cloud's machines, the cheapest and the fastest marked."""
    if gpu:
        raise Exit(
            f"error: --gpu {gpu}: a GPU's speed cannot be read from this machine's CPU profile; "
            "estimate CPU machines (--cpus N), or time the run on that GPU (invoke gpu-check)", 2
        )  # fmt: skip
    places = _places(cloud)
    counts = _counts("--nodes", nodes)
    least_cpus = whole_number("--cpus", cpus, 1)
    least_memory = whole_number("--memory", memory, 1) if memory else 0
    rows_shown = whole_number("--top", top, 1)
    runs = whole_number("--repeats", repeats, 1)
    cores = profiling.host_cores()
    profiled = _counts("--threads", threads) if threads else sorted({1, min(2, cores)})
    if max(profiled) > cores:
        raise Exit(f"error: --threads {threads}: this machine has {cores} cores", 2)
    if 1 not in profiled:
        profiled = [1, *profiled]  # the model starts from one thread
    if "local" in places and max(counts) > cores:
        raise Exit(f"error: --nodes {nodes}: local nodes share this machine's {cores} cores", 2)
    if machine and "local" in places:
        raise Exit("error: --machine names a cloud's machine; --cloud local is this one", 2)
    given = override_args(c)
    try:  # every flag is checked before the minute of profiling
        offered = candidates(cores, places, counts, least_cpus, least_memory, machine, spot)
        if not offered:
            raise Exit(
                f"error: no machine of {', '.join(places)} has {least_cpus}+ vCPUs and "
                f"{least_memory}+ GiB{' with a spot price' if spot else ''}: invoke machines", 2
            )  # fmt: skip
    except (catalog.CatalogError, model.EstimateError) as error:
        raise Exit(f"error: {error}", 2) from None
    config = profiling.run_config(given)  # bad overrides: the trainer's own line, at once
    print(f"profiling the run here ({', '.join(map(str, profiled))} threads, half the batch, "
          "two processes): a minute or two", flush=True)  # fmt: skip
    found = profiling.profile(given, profiled, repeats=runs, config=config)
    where = profiling.save(found, given)
    show([model.estimate(found, w) for w in offered], found, rows_shown, spot)
    print(f"profile kept in {where} (invoke train --dry-run shows its estimate)")
