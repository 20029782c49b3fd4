"""The GPU catalog (catalog.json) looked up: which machine gives N of a GPU on a cloud, at what
price, on which VM image with which NVIDIA driver. Errors name the value and the choices."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from . import project

CATALOG = Path(__file__).with_name("catalog.json")
IMAGE = "image.json"  # in the project: its image's CUDA and the driver it needs (from the template)
CLOUDS = ("aws", "gcp", "azure")


class CatalogError(ValueError):
    """A GPU, count or cloud the catalog does not offer; the message lists what it does."""


@dataclass(frozen=True)
class Offer:
    """One machine of the catalog: `count` GPUs of kind `gpu` on `cloud`, or a CPU machine
    (machines.py: no GPU, count 0) with its CPU's words and physical cores."""

    cloud: str
    gpu: str
    count: int
    machine: str
    accelerator: (
        str | None
    )  # GCP's N1 hosts take the GPU as an accelerator; others have it built in
    vcpus: int
    memory_gib: float
    on_demand: float
    spot: float | None
    region: str  # the region the prices are for
    note: str
    source: str  # what the numbers come from, and their date
    network: str = ""  # its network where the catalog says (e.g. "400 Gbps EFA")
    cpu: str = ""  # a CPU machine's processor, e.g. "Intel Xeon (Sapphire Rapids), AVX-512"
    cores: int = 0  # a CPU machine's physical cores: the trainer's threads
    family: str = ""  # a CPU machine's family in machines.json (c7i, n2d, Dsv5, ...)

    @property
    def is_cpu(self) -> bool:
        """A machine without GPUs: the CPU image, no NVIDIA driver on its VM image."""
        return self.count == 0

    def price(self, spot: bool) -> float | None:
        """USD per hour of the whole machine; None where the catalog has no spot price."""
        return self.spot if spot else self.on_demand


@cache
def load() -> dict[str, Any]:
    return json.loads(CATALOG.read_text(encoding="utf-8"))


def parse_gpu(text: str) -> tuple[str, int]:
    """`--gpu=t4` or `--gpu=a100:8` -> ('t4', 1), ('a100', 8); CatalogError naming the GPUs."""
    name, _, count = text.strip().lower().partition(":")
    if name not in load()["gpus"]:
        raise CatalogError(
            f"--gpu {text!r}: no GPU {name!r}; choose one of {', '.join(load()['gpus'])}"
        )
    if count and not (count.isdigit() and int(count) >= 1):
        raise CatalogError(
            f"--gpu {text!r}: the count after ':' must be a whole number, e.g. {name}:4"
        )
    return name, int(count or 1)


def offer(cloud: str, gpu: str, count: int) -> Offer:
    """The machine for `count` x `gpu` on `cloud`."""
    if cloud not in CLOUDS:
        raise CatalogError(f"--cloud {cloud!r}: choose one of {', '.join(CLOUDS)}, or local")
    offered = load()["clouds"][cloud]
    if gpu not in offered["gpus"]:
        raise CatalogError(
            f"--gpu {gpu}: {cloud} offers no {gpu} in the catalog; it offers "
            f"{', '.join(offered['gpus'])} (invoke gpus --cloud {cloud})"
        )
    counts = offered["gpus"][gpu]
    if str(count) not in counts:
        raise CatalogError(
            f"--gpu {gpu}:{count}: {cloud} has no machine with {count} x {gpu}; it offers "
            f"{', '.join(f'{gpu}:{n}' for n in counts)}"
        )
    entry = counts[str(count)]
    source = load()["sources"][entry["source"]]
    return Offer(
        cloud=cloud,
        gpu=gpu,
        count=count,
        machine=entry["machine"],
        accelerator=entry.get("accelerator"),
        vcpus=entry["vcpus"],
        memory_gib=entry["memory_gib"],
        on_demand=entry["on_demand"],
        spot=entry.get("spot"),
        region=offered["region"],
        note=entry.get("note", ""),
        source=f"{source['what']}, read {source['read']}",
        network=entry.get("network", ""),
    )


def vm_image(cloud: str) -> dict[str, Any]:
    """The VM image a cloud's runs boot (with its NVIDIA driver branch)."""
    return dict(load()["clouds"][cloud]["image"])


def gpu_spec(gpu: str) -> dict[str, Any]:
    """name, memory_gb and compute_capability of a GPU."""
    return dict(load()["gpus"][gpu])


def project_image() -> dict[str, Any]:
    """The CUDA the project's GPU image needs: cuda, min_driver, min_compute_capability."""
    return json.loads((project.ROOT / IMAGE).read_text(encoding="utf-8"))


def check_runs(offered: Offer) -> None:
    """CatalogError unless the project's GPU image runs on that machine's GPU and VM image."""
    needs = project_image()
    driver = vm_image(offered.cloud)["driver"]
    capability = gpu_spec(offered.gpu)["compute_capability"]
    if version(driver) < version(needs["min_driver"]):
        raise CatalogError(
            f"the image's CUDA {needs['cuda']} needs an NVIDIA driver >= {needs['min_driver']}; "
            f"{offered.cloud}'s VM image has {driver}: build on an older CUDA row (the "
            "template's images/matrix.json) or choose another cloud"
        )
    if version(capability) < version(needs["min_compute_capability"]):
        raise CatalogError(
            f"--gpu {offered.gpu}: the image's CUDA {needs['cuda']} runs on compute capability "
            f">= {needs['min_compute_capability']}, and a {offered.gpu} is {capability}: choose "
            "a newer GPU, or build on a CUDA 12 row of the template's images/matrix.json"
        )


def version(text: str) -> tuple[int, ...]:
    """ "12.8" -> (12, 8), for comparing driver, CUDA and compute-capability numbers."""
    return tuple(int(part) for part in str(text).split("."))


def rows(cloud: str | None = None) -> list[Offer]:
    """Every offer of the catalog (of one cloud), in catalog order."""
    clouds = [cloud] if cloud else list(CLOUDS)
    return [
        offer(name, gpu, int(count))
        for name in clouds
        for gpu, counts in load()["clouds"][name]["gpus"].items()
        for count in counts
    ]


def service_name(kind: str, gpu: str) -> str:
    """What a training service calls `gpu` (`kind`: vertex_accelerator, skypilot_accelerator)."""
    names = load()["services"][kind]
    if gpu not in names:
        known = ", ".join(name for name in names if name != "source")
        raise CatalogError(
            f"--gpu {gpu}: {kind.split('_')[0]} has no name for it; it takes {known}"
        )
    return str(names[gpu])


def job_price(backend: str, offered: Offer, spot: bool) -> tuple[float | None, str]:
    """USD per hour of one node of a training-service job, and what the number is."""
    services = load()["services"]
    vm_price = offered.price(spot)
    if backend == "skypilot":
        picks = (
            "picks the cheapest machine with at least its vCPUs and memory"
            if offered.is_cpu
            else "may pick another machine with these GPUs"
        )
        return (
            vm_price,
            f"{offered.source}; SkyPilot {picks}, and adds its jobs controller, a small CPU VM",
        )
    if offered.cloud == "aws":
        listed = services["sagemaker_on_demand"]
        kind = f"ml.{offered.machine}"
        sources = load()["sources"]
        if kind in listed:
            source = sources[listed["source"]]
            what = f"SageMaker's {kind} rate, {listed['source']} (data dated {source['dated']})"
            price = float(listed[kind])
        else:
            factor = services["sagemaker_unlisted_factor"]
            price = round(offered.on_demand * factor["value"], 4)
            what = f"EC2's rate x {factor['value']} ({factor['source']})"
        # Managed spot bills fewer seconds at no published rate: the on-demand rate caps it.
        return price, what + (", spot bills less: at most this" if spot else "")
    if offered.cloud == "azure":
        return vm_price, f"{offered.source}; Azure ML bills the VM's price"
    return vm_price, (
        f"{offered.source}; at least this: Vertex AI's own rate is higher and not in the catalog"
    )
