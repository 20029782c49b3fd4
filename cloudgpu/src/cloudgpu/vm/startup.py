"""cloud/vm/startup.sh with a run's values written in: the script a run's VM (or this machine, for
--cloud=local) starts with. Only names and places go in; secrets are read on the VM."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..plan import Plan

SCRIPT = Path(__file__).with_name("startup.sh")
MARKER = "# --- the run's values: vm/startup.py writes them here ---"
# Where each cloud's VM asks for preemption notices and its own identity.
METADATA_URL = {
    "aws": "http://169.254.169.254",
    "gcp": "http://metadata.google.internal",
    "azure": "http://169.254.169.254",
    "local": "",
}


# Seconds a preempted trainer gets to checkpoint: within the cloud's notice (AWS 2 minutes,
# GCP 30 s, Azure Scheduled Events at least 30 s: each cloud's documentation), less the upload.
PREEMPT_GRACE = {"aws": 90, "gcp": 20, "azure": 20, "local": 20}


def values(plan: Plan, registry: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The shell variables startup.sh reads, from the plan."""
    settings = plan.settings
    return {
        "CLOUD": plan.cloud,
        "RUN_ID": plan.run_id,
        "IMAGE": plan.image,
        "REGISTRY": registry,
        "BUCKET": plan.bucket,
        **deadlines(plan),
        "GPUS": str(plan.offer.count if plan.offer else 0),
        # A CPU machine's VM image may need Docker or the CLI installed (machines.json).
        "HOST_TOOLS": "1" if plan.offer is not None and plan.offer.is_cpu else "",
        "CONTAINER_ARGS": shlex.join(plan.container),
        "SECRETS": plan.secret_names,
        "METADATA_URL": settings.get("metadata_url", METADATA_URL[plan.cloud]),
        "REGION": plan.region,
        "ZONE": plan.zone,
        "PROJECT": settings.get("project", ""),
        "STORAGE_ACCOUNT": settings.get("storage_account", ""),
        "KEY_VAULT": settings.get("key_vault", ""),
        "IDENTITY": settings.get("identity", ""),
        **_monitoring(plan),
        **(extra or {}),
    }


def deadlines(plan: Plan) -> dict[str, str]:
    """When the VM stops training, deletes itself whatever hangs, and how long a preempted
    trainer may take to checkpoint: all before the cloud's own cap, the launch's deadline."""
    seconds = int(plan.max_hours * 3600)
    return {
        "DEADLINE": str(int(plan.deadline_time.timestamp())),  # epoch seconds, UTC
        "STOP_BEFORE": str(min(600, seconds // 5)),  # time for the checkpoint and the upload
        "WATCHDOG_BEFORE": str(min(60, seconds // 20)),
        "PREEMPT_GRACE": str(PREEMPT_GRACE[plan.cloud]),
    }


def _monitoring(plan: Plan) -> dict[str, str]:
    """--monitor: the trainer's port to publish, where to listen, each exporter's docker run."""
    if not plan.monitor:
        return {"MONITOR_PORT": "", "METRICS_BIND": "", "EXPORTERS": ""}
    from . import exporters, tunnels

    bind = tunnels.bind_address(plan.cloud)
    gpus = plan.offer.count if plan.offer else 0
    return {
        "MONITOR_PORT": str(exporters.trainer_port()),
        "METRICS_BIND": bind,
        "EXPORTERS": "\n".join(exporters.docker_runs(plan.run_id, gpus, bind)),
    }


def render(plan: Plan, registry: str, extra: dict[str, str] | None = None) -> str:
    """startup.sh with the run's values in place of its marker line."""
    text = SCRIPT.read_text(encoding="utf-8")
    if text.count(MARKER) != 1:
        raise ValueError(f"{SCRIPT} needs exactly one line {MARKER!r}")
    lines = [
        f"{name}={shlex.quote(value)}" for name, value in values(plan, registry, extra).items()
    ]
    header = "\n".join(["# --- the run's values (vm/startup.py) ---", *lines])
    return text.replace(MARKER, header)
