"""Which machine the flags of `invoke train --cloud=...` choose: --gpu NAME[:COUNT], --cpus N
[--memory GB] or --machine TYPE on one cloud, or with --cloud=any the catalog's choice on each of
its clouds (SkyPilot picks where it runs; the dearest bounds the price)."""

from __future__ import annotations

from cloudgpu import catalog, machines
from cloudgpu.plan import PlanError

from .project import DEFAULT_GPU

ANYWHERE = "any"  # --cloud=any --backend=skypilot: SkyPilot picks the cloud


def choose_machine(
    cloud: str, gpu: str, cpus: str, memory: str, machine: str, spot: bool, backend: str = "vm"
) -> catalog.Offer | None:
    """The machine of --gpu NAME[:COUNT], of --cpus N [--memory GB] (the cheapest that fits and
    that `backend` runs on) or of --machine TYPE: one of the three, --gpu's default when none;
    None for --cloud=local."""
    flags = {"gpu": gpu, "cpus": cpus, "memory": memory, "machine": machine}
    given = [f"--{flag}" for flag, value in flags.items() if value]
    if (gpu or machine) and len(given) > 1:
        raise PlanError(
            f"{' with '.join(given)}: choose the machine one way: --gpu NAME[:COUNT], --cpus N "
            "[--memory GB] or --machine TYPE (invoke machines lists them)"
        )
    if cloud == "local":
        if cpus or memory or machine:
            raise PlanError(f"{given[0]}: picks a cloud machine; --cloud=local runs on this one")
        catalog.parse_gpu(gpu or DEFAULT_GPU)
        return None
    if machine:
        offer = machines.named(cloud, machine)
    elif cpus or memory:
        least = machines.whole("--cpus", cpus) if cpus else 1
        least_memory = machines.whole("--memory", memory) if memory else 0
        offer = machines.cpu_offer(cloud, least, least_memory, spot, backend)
    else:
        offer = catalog.offer(cloud, *catalog.parse_gpu(gpu or DEFAULT_GPU))
    if not offer.is_cpu:
        catalog.check_runs(offer)
    if spot and offer.spot is None:
        raise PlanError(
            f"--spot: the catalog has no spot price for {offer.machine} on {cloud} "
            "(not offered as spot there): drop --spot, or choose another machine"
        )
    return offer


def check_anywhere(backend: str, region: str, zone: str, machine: str) -> None:
    """--cloud=any is SkyPilot's to place: a flag that names one cloud's place or machine, or
    another backend, stops here in one line."""
    if backend != "skypilot":
        raise PlanError(
            f"--cloud={ANYWHERE}: only --backend=skypilot picks the cloud itself; add it, or "
            f"choose one of {', '.join(catalog.CLOUDS)}"
        )
    for flag, value in (("--region", region), ("--zone", zone), ("--machine", machine)):
        if value:
            raise PlanError(
                f"{flag} {value} with --cloud={ANYWHERE}: it names one cloud's; give --gpu or "
                "--cpus [--memory] and SkyPilot picks the cloud, or name the cloud"
            )


def anywhere_offers(
    gpu: str, cpus: str, memory: str, spot: bool, backend: str
) -> tuple[catalog.Offer, ...]:
    """The catalog's machine for the run on each of its clouds that has one: what --cloud=any's
    price is bounded by. When no cloud has one, their reasons (one, where they agree)."""
    found, reasons = list[catalog.Offer](), dict[str, str]()
    for cloud in catalog.CLOUDS:
        try:
            offer = choose_machine(cloud, gpu, cpus, memory, "", spot, backend)
        except (PlanError, catalog.CatalogError) as error:
            reasons[cloud] = str(error)
            continue
        assert offer is not None  # None only for --cloud=local
        found.append(offer)
    if not found:
        if len(set(reasons.values())) == 1:
            raise PlanError(next(iter(reasons.values())))
        raise PlanError("; ".join(f"{cloud}: {why}" for cloud, why in reasons.items()))
    return tuple(found)
