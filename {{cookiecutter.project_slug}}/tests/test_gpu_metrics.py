"""The GPUs' live metrics read through NVML, shown with a stand-in NVML of four GPUs: the GPUs of
this process (CUDA_VISIBLE_DEVICES, by index or UUID) under the numbers it uses, a reading NVML
cannot give dropped alone, and an NVML that fails leaving the run without GPU series."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from {{ cookiecutter.package_name }}.tracking import gpu_metrics


class NotSupported(Exception):
    pass


class FakeNvml:
    """Four GPUs in PCI bus order; the last one a MIG-like device without power or use."""

    NVML_TEMPERATURE_GPU = 0

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.uuids = [f"GPU-{n}{n}{n}{n}-aaaa" for n in range(4)]

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML: driver/library version mismatch")

    def nvmlDeviceGetCount(self) -> int:
        return len(self.uuids)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        return self.uuids.index(uuid)

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return self.uuids[handle].encode()

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        if handle == 3:
            raise NotSupported("not supported on a MIG device")
        return SimpleNamespace(gpu=10 * (handle + 1))

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return SimpleNamespace(used=handle * 1000, total=80_000)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        return 40 + handle

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        if handle == 3:
            raise NotSupported("not supported on a MIG device")
        return 100_000 + handle


def samples(registry: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    return {
        (sample.name, sample.labels["gpu"], sample.labels["gpu_uuid"]): sample.value
        for family in registry.collect()
        for sample in family.samples
        if sample.name.startswith("train_gpu_")
    }


def register(nvml: FakeNvml, visible: str | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    registry = CollectorRegistry()
    return registry, gpu_metrics.register(registry, {"run": "r", "rank": "0"})


def test_the_gpus_this_process_sees_under_its_own_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = FakeNvml()
    registry, registered = register(nvml, f"2,{nvml.uuids[0]}", monkeypatch)
    assert registered
    got = samples(registry)
    # cuda:0 is NVML's GPU 2, cuda:1 NVML's GPU 0: never NVML's numbering under ours.
    assert got[("train_gpu_utilization_ratio", "0", nvml.uuids[2])] == 0.3
    assert got[("train_gpu_utilization_ratio", "1", nvml.uuids[0])] == 0.1
    assert {gpu for _, gpu, _ in got} == {"0", "1"}


def test_a_reading_nvml_cannot_give_drops_that_series_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvml = FakeNvml()
    registry, _ = register(nvml, "3,1", monkeypatch)
    got = samples(registry)
    mig = nvml.uuids[3]
    assert ("train_gpu_power_watts", "0", mig) not in got
    assert ("train_gpu_utilization_ratio", "0", mig) not in got
    assert got[("train_gpu_memory_used_bytes", "0", mig)] == 3000
    assert got[("train_gpu_temperature_celsius", "0", mig)] == 43
    assert got[("train_gpu_power_watts", "1", nvml.uuids[1])] == 100.001


def test_every_gpu_without_cuda_visible_devices_and_none_for_an_empty_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry, registered = register(FakeNvml(), None, monkeypatch)
    assert registered and {gpu for _, gpu, _ in samples(registry)} == {"0", "1", "2", "3"}
    assert register(FakeNvml(), "", monkeypatch)[1] is False  # the GPUs hidden


def test_an_nvml_that_fails_leaves_no_gpu_series_and_no_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry, registered = register(FakeNvml(fail_init=True), None, monkeypatch)
    assert registered is False and samples(registry) == {}


@pytest.mark.gpu
@pytest.mark.parametrize("by", ["index", "uuid"])
def test_the_real_nvml_names_the_gpu_cuda_calls_0(monkeypatch: pytest.MonkeyPatch, by: str) -> None:
    """On a GPU machine, the driver's own NVML: a GPU named by index or by UUID is labelled 0 with
    the UUID nvidia-smi gives it, and every reading is there (a whole GPU, not a MIG slice)."""
    listed = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip
    # the last GPU: on a box of several, not NVML's 0
    index, uuid = (part.strip() for part in listed[-1].split(","))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", index if by == "index" else uuid)
    registry = CollectorRegistry()
    assert gpu_metrics.register(registry, {"run": "r", "rank": "0"})
    got = samples(registry)
    assert {(gpu, label) for _, gpu, label in got} == {("0", uuid)}
    assert {name for name, _, _ in got} == set(gpu_metrics.READINGS)
    assert got[("train_gpu_memory_total_bytes", "0", uuid)] > 2**30
