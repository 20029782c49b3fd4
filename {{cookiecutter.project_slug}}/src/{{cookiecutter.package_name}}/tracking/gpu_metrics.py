"""The GPUs of this process for the live metrics, read through NVML (nvidia-ml-py) at scrape time:
utilisation, memory, temperature and power. Without a driver (a CPU machine) nothing is
registered, so a CPU run reports no GPU series at all rather than zeros.

NVML numbers every GPU of the machine in PCI bus order and knows nothing of CUDA_VISIBLE_DEVICES;
a process sees the GPUs that variable names, renumbered from 0. So the GPUs are matched by UUID
(or, for an index in the variable, by NVML's index, as CUDA numbers them with
CUDA_DEVICE_ORDER=PCI_BUS_ID and as cloud VMs of one GPU model number them either way), and each
is labelled with the number this process uses and its UUID, as dcgm-exporter labels it. A value
NVML cannot give (power or utilisation of a MIG slice) drops that one series; a failing NVML never
stops the run.

On a cloud VM, NVIDIA's dcgm-exporter reports the same and more; these are here so that a run
on any machine with a GPU shows them next to its own numbers, labelled with the run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

# name -> (help, how to read it from a device handle)
READINGS: dict[str, tuple[str, Callable[[Any, Any], float]]] = {
    "train_gpu_utilization_ratio": (
        "Share of time a kernel ran, 0 to 1.",
        lambda nvml, h: nvml.nvmlDeviceGetUtilizationRates(h).gpu / 100,
    ),
    "train_gpu_memory_used_bytes": (
        "GPU memory in use.", lambda nvml, h: nvml.nvmlDeviceGetMemoryInfo(h).used
    ),
    "train_gpu_memory_total_bytes": (
        "GPU memory in all.", lambda nvml, h: nvml.nvmlDeviceGetMemoryInfo(h).total
    ),
    "train_gpu_temperature_celsius": (
        "GPU temperature.",
        lambda nvml, h: nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU),
    ),
    "train_gpu_power_watts": (
        "GPU power draw.", lambda nvml, h: nvml.nvmlDeviceGetPowerUsage(h) / 1000
    ),
}  # fmt: skip


def register(registry: Any, labels: Mapping[str, str]) -> bool:
    """Add the GPU collector to `registry`; False (and nothing added) where NVML is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = visible_handles(pynvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
    except Exception as error:  # no nvidia-ml-py, or NVMLError: no driver, no device
        log.debug("no GPU metrics: %s", error)
        return False
    if not handles:
        return False
    registry.register(GpuCollector(pynvml, handles, dict(labels)))
    return True


def visible_handles(nvml: Any, visible: str | None) -> list[tuple[Any, str]]:
    """(handle, UUID) of each GPU this process sees, in the order it numbers them."""
    every = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    if visible is None:
        return [(handle, _uuid(nvml, handle)) for handle in every]
    found = []
    for entry in filter(None, (part.strip() for part in visible.split(","))):
        if entry.isdigit() and int(entry) < len(every):
            handle = every[int(entry)]
        elif entry.startswith(("GPU-", "MIG-")):
            handle = nvml.nvmlDeviceGetHandleByUUID(entry)
        else:
            break  # CUDA stops at the first entry it cannot use, as here
        found.append((handle, _uuid(nvml, handle)))
    return found


def _uuid(nvml: Any, handle: Any) -> str:
    uuid = nvml.nvmlDeviceGetUUID(handle)
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


class GpuCollector:
    """prometheus_client's collector of READINGS for each of `handles`."""

    def __init__(self, nvml: Any, handles: list[tuple[Any, str]], labels: dict[str, str]) -> None:
        self.nvml, self.handles, self.labels = nvml, handles, labels

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        names = [*self.labels, "gpu", "gpu_uuid"]
        for metric, (text, read) in READINGS.items():
            family = GaugeMetricFamily(metric, text, labels=names)
            for index, (handle, uuid) in enumerate(self.handles):
                try:
                    value = read(self.nvml, handle)
                except Exception as error:  # not supported there (a MIG slice), or gone
                    log.debug("GPU %d: %s: %s", index, metric, error)
                    continue
                family.add_metric([*self.labels.values(), str(index), uuid], value)
            yield family
