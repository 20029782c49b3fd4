"""A plan in words: the rows `invoke train --cloud` shows before anything is paid for (the
machine, the price and how it is known, the cost cap and what it leaves out, what ends the run)."""

from __future__ import annotations

import shlex

from .catalog import Offer
from .plan import DISK_GB, Plan


def rows(plan: Plan) -> list[tuple[str, str]]:
    """What a person checks before paying: the table `invoke train --cloud` shows."""
    offer = plan.offer
    shown = [("run", plan.run_id), ("cloud", f"{plan.cloud} {plan.region} {plan.zone}".strip())]
    if plan.anywhere:
        shown[1] = ("cloud", f"any that SkyPilot has enabled (sky check); image and outputs on "
                            f"{plan.cloud}")  # fmt: skip
    if offer is not None:
        machine = f"{offer.machine} ({offer.vcpus} vCPUs, {offer.memory_gib} GiB)"
        shown += [
            _anywhere_row(plan) if plan.anywhere else ("machine", machine),
            _processor_row(offer, plan.spot, bool(plan.anywhere)),
            *([("nodes", f"{plan.nodes} machines like it")] if plan.nodes > 1 else []),
            *([("between nodes", _efa_words(offer))] if _efa_matters(plan) else []),
            *([("engine", _engine(plan))] if plan.is_job else []),
            (
                "price",
                f"${plan.price:.3f}/h, {'at most' if plan.anywhere else 'estimated'} "
                f"({plan.price_note or offer.source})"
                if plan.price is not None
                else "unknown: the catalog has no spot price",
            ),
            ("cost cap", _cap_words(plan)),
        ]
    shown += [
        ("image", plan.image),
        ("outputs", plan.bucket),
        _limit(plan),
        ("command", shlex.join(plan.container)),
    ]
    return shown


def _engine(plan: Plan) -> str:
    if plan.anywhere:
        return "SkyPilot managed job, on the cloud SkyPilot picks"
    return ENGINES[plan.backend, plan.cloud]


def _efa_matters(plan: Plan) -> bool:
    return plan.nodes > 1 and plan.offer is not None and "EFA" in plan.offer.network


def _limit(plan: Plan) -> tuple[str, str]:
    """The summary's row for what ends the run, and who enforces it."""
    if plan.backend == "skypilot":  # no limit of SkyPilot's: the task's own timeout
        return ("deadline", f"{plan.deadline} (the task stops itself then)")
    if plan.is_job:
        return ("time limit", f"{plan.max_hours:g} h of running, then the service stops it")
    return ("deadline", f"{plan.deadline} (the machine deletes itself; {_cloud_cap(plan)})")


def _cloud_cap(plan: Plan) -> str:
    """What ends the VM at its deadline if its own script cannot (providers/*.py)."""
    if plan.cloud == "azure" and plan.max_hours >= 24:
        return "no cloud cap past 24 h on Azure: the VM's watchdog only"
    return CLOUD_CAPS.get(plan.cloud, "no cloud cap")


def _anywhere_row(plan: Plan) -> tuple[str, str]:
    """--cloud=any's machine row: what SkyPilot is asked for, under what rate, and the
    catalog's machine for it on each of its clouds."""
    assert plan.offer is not None and plan.worst_node_price is not None
    if plan.offer.is_cpu:
        vcpus, memory = plan.cpus_asked
        asked = f"at least {vcpus} vCPUs and {memory:g} GiB"
    else:
        asked = f"{plan.offer.count} x {plan.offer.gpu}"
    each = ", ".join(f"{o.cloud} {o.machine} ${o.price(plan.spot):.3f}/h"
                     for o in plan.anywhere)  # fmt: skip
    rate = f"${plan.worst_node_price:.3f}/h"
    return ("machine", f"SkyPilot's cheapest with {asked} at up to {rate} (max_hourly_cost); "
                       f"here: {each}")  # fmt: skip


def _processor_row(offer: Offer, spot: bool, anywhere: bool = False) -> tuple[str, str]:
    """The summary's GPU row, or a CPU machine's CPU row (its threads: the physical cores)."""
    spot_words = ", spot" if spot else ""
    if offer.is_cpu and anywhere:
        return ("CPU", f"the one of the machine SkyPilot picks{spot_words}")
    if offer.is_cpu:
        return ("CPU", f"{offer.cpu}; {offer.cores} cores, a trainer thread each{spot_words}")
    return ("GPU", f"{offer.count} x {offer.gpu}{spot_words}")


def _efa_words(offer: Offer) -> str:
    return (
        f"{offer.network} on {offer.machine}, but NCCL reaches EFA only through AWS's "
        "aws-ofi-nccl plugin, which this project's images lack: the nodes talk over TCP "
        "(cloudgpu docs/clouds.md: Between nodes: EFA)"
    )


def _cap_words(plan: Plan) -> str:
    """The cost cap as the summary says it: the sum, how it is made, and what it leaves out."""
    if plan.cost_cap is None or plan.worst_price is None:
        return f"--max-hours {plan.max_hours:g}; the price is unknown"
    flags = [f"--max-hours {plan.max_hours:g}"]
    sum_ = f"{plan.max_hours:g} h x ${plan.worst_price:.3f}/h"
    if plan.attempts > 1:
        sum_ += f" x {plan.attempts} launches"
        flags.append(f"--retries {plan.attempts - 1}")
    words = [f"${plan.cost_cap:.2f} at most: {sum_} ({', '.join(flags)})"]
    if plan.spot:
        words.append("a spot hour bills at most the on-demand rate")
    if plan.anywhere:
        words.append(f"not counted: each node's {DISK_GB} GB disk, SkyPilot's jobs controller, "
                     f"and moving the image and outputs between {plan.cloud} and another cloud "
                     "(egress)")  # fmt: skip
    elif plan.backend == "skypilot":
        words.append(f"not counted: each node's {DISK_GB} GB disk, and SkyPilot's jobs controller")
    elif not plan.is_job:
        words.append(f"not counted: the {DISK_GB} GB disk while the machine exists")
    return "; ".join(words)


CLOUD_CAPS = {
    "aws": "the cloud's cap: a scheduled terminate",
    "gcp": "the cloud's cap: --max-run-duration",
    "azure": "the cloud's cap: an auto-shutdown (deallocate)",
}

ENGINES = {
    ("managed", "aws"): "SageMaker training job",
    ("managed", "gcp"): "Vertex AI custom job",
    ("managed", "azure"): "Azure ML command job (serverless compute)",
    **{
        ("skypilot", cloud): f"SkyPilot managed job on {cloud}" for cloud in ("aws", "gcp", "azure")
    },
}
