"""What a cloud run can start on: `invoke machines` (CPU and GPU machines, with filters) and
`invoke gpus` (its GPU view), from cloudgpu/catalog.json and cloudgpu/machines.json."""

from __future__ import annotations

from invoke import Context, Exit, task

from cloudgpu import catalog, machines

from .remote import table

KINDS = ("cpu", "gpu")


def _cloud(cloud: str) -> str | None:
    if cloud and cloud not in catalog.CLOUDS:
        raise Exit(f"error: --cloud {cloud!r}: choose one of {', '.join(catalog.CLOUDS)}", 2)
    return cloud or None


def _at_least(flag: str, value: str) -> int:
    try:
        return machines.whole(flag, value) if value else 0
    except catalog.CatalogError as error:
        raise Exit(f"error: {error}", 2) from None


@task(
    name="machines",
    help={
        "cloud": "one cloud's machines (default: every cloud's)",
        "cpus": "only machines with at least this many vCPUs",
        "memory": "only machines with at least this many GiB of memory",
        "kind": "only cpu or only gpu machines",
        "gpu": "only machines with this GPU (invoke gpus)",
    },
)
def machines_(
    c: Context, cloud: str = "", cpus: str = "", memory: str = "", kind: str = "", gpu: str = ""
) -> None:
    """CPU and GPU machines: vCPUs, memory, processor, network, on-demand and spot $/h."""
    where = _cloud(cloud)
    least_cpus, least_memory = _at_least("--cpus", cpus), _at_least("--memory", memory)
    if kind and kind not in KINDS:
        raise Exit(f"error: --kind {kind!r}: choose one of {', '.join(KINDS)}", 2)
    if gpu and gpu not in catalog.load()["gpus"]:
        raise Exit(f"error: --gpu {gpu!r}: choose one of {', '.join(catalog.load()['gpus'])}", 2)
    offers = [
        *(machines.rows(where) if kind != "gpu" and not gpu else []),
        *(catalog.rows(where) if kind != "cpu" else []),
    ]
    chosen = [
        o for o in offers
        if o.vcpus >= least_cpus and o.memory_gib >= least_memory and (not gpu or o.gpu == gpu)
    ]  # fmt: skip
    if not chosen:
        raise Exit("error: no machine in the catalog has all of that: invoke machines lists all", 1)
    chosen.sort(key=lambda o: (catalog.CLOUDS.index(o.cloud), o.on_demand))
    header = ["CLOUD", "MACHINE", "vCPU", "GiB", "GPU / CPU", "NETWORK", "ON-DEMAND $/h",
              "SPOT $/h", "REGION"]  # fmt: skip
    table([header, *(_row(o) for o in chosen)])
    _sources({o.source for o in chosen})


def _row(offer: catalog.Offer) -> list[str]:
    processor = offer.cpu if offer.is_cpu else f"{offer.gpu}:{offer.count}"
    spot = f"{offer.spot:.4f}" if offer.spot is not None else "-"
    return [offer.cloud, offer.machine, str(offer.vcpus), f"{offer.memory_gib:g}", processor,
            offer.network or "-", f"{offer.on_demand:.4f}", spot, offer.region]  # fmt: skip


def _sources(used: set[str]) -> None:
    print("\nEstimates, from (check live prices before launching):")
    for source in sorted(used):
        print(f"  {source}")


@task(help={"cloud": "one cloud's offers (default: every cloud's)"})
def gpus(c: Context, cloud: str = "") -> None:
    """The GPU machines: invoke machines --kind gpu, in the catalog's order."""
    rows = [["CLOUD", "GPU", "MACHINE", "vCPU", "GiB", "ON-DEMAND $/h", "SPOT $/h", "REGION"]]
    for offer in catalog.rows(_cloud(cloud)):
        spot = f"{offer.spot:.4f}" if offer.spot is not None else "-"
        machine = [offer.machine, str(offer.vcpus), f"{offer.memory_gib:g}"]
        rows.append([offer.cloud, f"{offer.gpu}:{offer.count}", *machine,
                     f"{offer.on_demand:.4f}", spot, offer.region])  # fmt: skip
    table(rows)
    data = catalog.load()
    print(f"\nEstimates as of {data['as_of']}, from:")
    for key, source in data["sources"].items():
        print(f"  {key}: {source['what']} (data dated {source['dated']}, read {source['read']})")
