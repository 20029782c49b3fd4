"""Google Cloud's regional quotas, read before a VM is asked for: the GPU's, or an on-demand CPU
machine's family's vCPUs. A shortfall is one line naming the metric and where to raise it."""

from __future__ import annotations

import json
from typing import Any

from ..commands import Commands
from ..plan import Plan


def _gcloud(settings: dict[str, Any], *args: str) -> list[str]:
    return ["gcloud", *args, f"--project={settings['project']}", "--format=json"]


def quota_problem(plan: Plan, cmd: Commands) -> str | None:
    """The region's quota the run would exceed (_quota_metric), and how to raise it; None when
    it fits or cannot be read."""
    assert plan.offer is not None
    done = cmd.run(
        _gcloud(plan.settings, "compute", "regions", "describe", plan.region),
        check=False,
        quiet=True,
        dry_answer="{}",
    )
    if done.returncode != 0:
        return None
    metric, needed, unit = _quota_metric(plan)
    for quota in json.loads(done.stdout or "{}").get("quotas", []):
        if metric and quota.get("metric") == metric:
            free = quota.get("limit", 0) - quota.get("usage", 0)
            if free < needed:
                return (
                    f"quota: {metric} in {plan.region} has {free:g} of {needed} {unit} free: ask "
                    "for more on the console's Quotas page (IAM & Admin > Quotas), filtered by "
                    "that metric" + ("; GPUS_ALL_REGIONS may need raising too" if unit == "GPUs"
                                     else "")
                )  # fmt: skip
    return None


def _quota_metric(plan: Plan) -> tuple[str, int, str]:
    """The region's quota metric the plan's machine counts against, and how much it needs: a
    GPU's (PREEMPTIBLE_ for spot), or an on-demand CPU machine's family's vCPUs (C3_CPUS, ...;
    a spot CPU machine's quota is not checked: which metric counts it was not confirmed)."""
    offer = plan.offer
    assert offer is not None
    if offer.is_cpu:
        return ("", 0, "") if plan.spot else (f"{offer.family.upper()}_CPUS", offer.vcpus, "vCPUs")
    gpu = (offer.accelerator or f"nvidia-{offer.gpu}").removeprefix("nvidia-tesla-")
    metric = f"NVIDIA_{gpu.removeprefix('nvidia-').upper().replace('-', '_')}_GPUS"
    return (f"PREEMPTIBLE_{metric}" if plan.spot else metric), offer.count, "GPUs"
