"""The machine's NVIDIA GPUs for the live metrics, read through NVML (nvidia-ml-py) at scrape time:
utilisation, memory, temperature and power. Without a driver (a CPU machine) nothing is
registered, so a CPU run reports no GPU series at all rather than zeros.

On a cloud VM, NVIDIA's dcgm-exporter reports the same and more; these are here so that a run
on any machine with a GPU shows them next to its own numbers, labelled with the run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)


def register(registry: Any, labels: Mapping[str, str]) -> bool:
    """Add the GPU collector to `registry`; False (and nothing added) where NVML is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except Exception as error:  # no nvidia-ml-py, or NVMLError: no driver, no device
        log.debug("no GPU metrics: %s", error)
        return False
    if count == 0:
        return False
    registry.register(_GpuCollector(pynvml, count, dict(labels)))
    return True


class _GpuCollector:
    def __init__(self, nvml: Any, count: int, labels: dict[str, str]) -> None:
        self.nvml, self.labels = nvml, labels
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def describe(self) -> list:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        nvml = self.nvml
        names = [*self.labels, "gpu"]
        made = {
            "utilization": GaugeMetricFamily(
                "train_gpu_utilization_ratio", "Share of time a kernel ran, 0 to 1.", labels=names
            ),
            "used": GaugeMetricFamily(
                "train_gpu_memory_used_bytes", "GPU memory in use.", labels=names
            ),
            "total": GaugeMetricFamily(
                "train_gpu_memory_total_bytes", "GPU memory in all.", labels=names
            ),
            "temperature": GaugeMetricFamily(
                "train_gpu_temperature_celsius", "GPU temperature.", labels=names
            ),
            "power": GaugeMetricFamily("train_gpu_power_watts", "GPU power draw.", labels=names),
        }
        for index, handle in enumerate(self.handles):
            values = [*self.labels.values(), str(index)]
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                made["utilization"].add_metric(
                    values, nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100
                )
                made["used"].add_metric(values, memory.used)
                made["total"].add_metric(values, memory.total)
                made["temperature"].add_metric(
                    values, nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
                )
                made["power"].add_metric(values, nvml.nvmlDeviceGetPowerUsage(handle) / 1000)
            except Exception as error:  # a GPU that fell off the bus: skip it, keep the rest
                log.debug("GPU %d: %s", index, error)
        yield from made.values()
