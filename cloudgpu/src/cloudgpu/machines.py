"""The CPU machines (machines.json) looked up: which machine of a cloud gives N vCPUs and M GiB
at the lowest price, or the one named by --machine (CPU or GPU), and the VM image a CPU run
boots (Docker, no NVIDIA driver). Errors name the value and what is offered."""

from __future__ import annotations

import difflib
import json
from functools import cache
from pathlib import Path
from typing import Any

from . import catalog
from .catalog import CLOUDS, CatalogError, Offer
from .providers import sagemaker_instances

MACHINES = Path(__file__).with_name("machines.json")
SERVICES = {"aws": "SageMaker", "gcp": "Vertex AI", "azure": "Azure ML"}  # --backend=managed


@cache
def load() -> dict[str, Any]:
    return json.loads(MACHINES.read_text(encoding="utf-8"))


def _cloud(cloud: str) -> dict[str, Any]:
    if cloud not in CLOUDS:
        raise CatalogError(f"--cloud {cloud!r}: choose one of {', '.join(CLOUDS)}, or local")
    return dict(load()["clouds"][cloud])


def _offer(cloud: str, entry: dict[str, Any]) -> Offer:
    offered = _cloud(cloud)
    family = offered["families"][entry["family"]]
    source = load()["sources"][entry["source"]]
    words = f"{family['cpu']}{', AVX-512' if family.get('avx512') else ''}"
    return Offer(
        cloud=cloud,
        gpu="",
        count=0,
        machine=entry["machine"],
        accelerator=None,
        vcpus=entry["vcpus"],
        memory_gib=entry["memory_gib"],
        on_demand=entry["on_demand"],
        spot=entry.get("spot"),
        region=catalog.load()["clouds"][cloud]["region"],
        note=entry.get("note", ""),
        source=f"{source['what']}, read {source['read']}",
        network=entry.get("network", ""),
        cpu=words,
        cores=entry["vcpus"] // family["threads_per_core"],
        family=entry["family"],
    )


def rows(cloud: str | None = None) -> list[Offer]:
    """Every CPU machine of the catalog (of one cloud), in catalog order."""
    clouds = [cloud] if cloud else list(CLOUDS)
    return [_offer(name, entry) for name in clouds for entry in _cloud(name)["machines"]]


def whole(flag: str, text: str | int) -> int:
    """`--cpus 32` as 32; CatalogError naming the flag otherwise."""
    value = str(text).strip()
    if not value.isdigit() or int(value) < 1:
        raise CatalogError(f"{flag} {text!r}: give a whole number of at least 1, e.g. {flag} 32")
    return int(value)


def service_accepts(backend: str, cloud: str) -> set[str] | None:
    """The catalog's CPU machines a training service trains on (None: any): SageMaker's ml.*
    types (sagemaker_instances.json), the machine types Vertex AI lists."""
    if backend != "managed" or cloud == "azure":  # Azure ML takes any VM size
        return None
    names = {entry["machine"] for entry in _cloud(cloud)["machines"]}
    if cloud == "aws":
        listed = set(sagemaker_instances.names("TrainingInstanceType"))
        return {name for name in names if f"ml.{name}" in listed}
    return names & set(load()["services"]["vertex_training"]["types"])


def cpu_offer(
    cloud: str, cpus: int, memory_gib: int = 0, spot: bool = False, backend: str = "vm"
) -> Offer:
    """The cheapest CPU machine of `cloud` with at least `cpus` vCPUs and `memory_gib` GiB (at
    the price the run pays: spot with `spot`) that `backend` runs on; fewer vCPUs first among
    equal prices."""
    accepted = service_accepts(backend, cloud)
    offered = [o for o in rows(cloud) if accepted is None or o.machine in accepted]
    fits = [o for o in offered if o.vcpus >= cpus and o.memory_gib >= memory_gib]
    if spot:
        fits = [o for o in fits if o.spot is not None]
    if not fits:
        service = f" that {SERVICES[cloud]} trains on" if accepted is not None else ""
        raise CatalogError(_none_fits(cloud, offered, cpus, memory_gib, spot, service))
    return min(fits, key=lambda o: (o.price(spot), o.vcpus, o.memory_gib))


def _none_fits(
    cloud: str, offered: list[Offer], cpus: int, memory_gib: int, spot: bool, service: str
) -> str:
    most_cpus = max(offered, key=lambda o: o.vcpus)
    asked = f"--cpus {cpus}" + (f" --memory {memory_gib}" if memory_gib else "")
    if most_cpus.vcpus < cpus:
        return (
            f"{asked}: no {cloud} machine in the catalog{service} has {cpus} vCPUs; the most is "
            f"{most_cpus.vcpus} ({most_cpus.machine}): invoke machines --cloud {cloud}"
        )
    enough = [o for o in offered if o.vcpus >= cpus]
    most_memory = max(enough, key=lambda o: o.memory_gib)
    if most_memory.memory_gib < memory_gib:
        return (
            f"{asked}: no {cloud} machine in the catalog with {cpus}+ vCPUs has {memory_gib} "
            f"GiB; the most is {most_memory.memory_gib:g} GiB ({most_memory.machine}): invoke "
            f"machines --cloud {cloud} --cpus {cpus}"
        )
    return f"{asked} --spot: the catalog has no spot price for those {cloud} machines: drop --spot"


def named(cloud: str, machine: str) -> Offer:
    """The machine `--machine TYPE` names: a CPU machine of machines.json, or a GPU one of
    catalog.json (with its GPUs)."""
    cpu = {o.machine: o for o in rows(cloud)}
    if machine in cpu:
        return cpu[machine]
    gpus = catalog.rows(cloud)
    gpu = [o for o in gpus if o.machine == machine]
    if len(gpu) == 1:
        return gpu[0]
    if gpu:  # GCP's N1 hosts: the GPU is attached, so the machine alone does not say which
        given = " or ".join(f"--gpu {o.gpu}:{o.count}" for o in gpu)
        raise CatalogError(f"--machine {machine}: hosts several GPUs on {cloud}; give {given}")
    names = [*cpu, *(o.machine for o in gpus)]
    close = difflib.get_close_matches(machine, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(close)}?" if close else ""
    raise CatalogError(
        f"--machine {machine!r}: {cloud} has no such machine in the catalog{hint} "
        f"(invoke machines --cloud {cloud} lists them)"
    )


def vm_image(cloud: str) -> dict[str, Any]:
    """The VM image a CPU run boots: Docker and the cloud's CLI, no NVIDIA driver."""
    return dict(_cloud(cloud)["image"])


def boot_image(offer: Offer) -> dict[str, Any]:
    """The VM image `offer`'s machine boots: the CPU image, or catalog.json's GPU image."""
    return vm_image(offer.cloud) if offer.is_cpu else catalog.vm_image(offer.cloud)
