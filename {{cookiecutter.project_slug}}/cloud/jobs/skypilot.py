"""SkyPilot managed jobs (invoke train --cloud=aws|gcp|azure --backend=skypilot): one task file,
launched with `sky jobs launch`, for teams that already run SkyPilot.

SkyPilot's jobs controller starts the nodes, relaunches a preempted spot job and tears it all
down at the end. The image runs as the task's runtime (`image_id: docker:...`), each node runs
the launcher (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS), and the run folder is the run's bucket
prefix mounted at /outputs, so a relaunched job resumes from its last checkpoint.
Facts: ../shared facts on engines (SkyPilot 0.14.1's task schema and environment).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from ..catalog import Offer, service_name
from ..commands import CloudError, Commands
from ..plan import Plan

if TYPE_CHECKING:
    from .common import Distribution

MOUNT = "/outputs"
KILL_AFTER_S = 90  # after SIGTERM at the deadline, as long as a VM run's stop grace
SPEC = "skypilot-task.yaml"
FORMAT = "yaml"
STATES = {  # `sky jobs queue` status -> how a VM run's status.json says it
    "PENDING": "pending",
    "SUBMITTED": "pending",
    "STARTING": "pending",
    "RUNNING": "running",
    "RECOVERING": "running",
    "CANCELLING": "stopping",
    "SUCCEEDED": "finished",
    "CANCELLED": "stopped",
    "FAILED": "failed",
    "FAILED_SETUP": "failed",
    "FAILED_PRECHECKS": "failed",
    "FAILED_NO_RESOURCE": "failed",
    "FAILED_CONTROLLER": "failed",
}


def run_dir(bucket: str) -> str:
    del bucket
    return f"{MOUNT}/run"


def check(plan: Plan) -> None:
    assert plan.offer is not None
    if not plan.offer.is_cpu:
        service_name("skypilot_accelerator", plan.offer.gpu)


def _machine(offer: Offer) -> dict[str, Any]:
    """The GPUs, not the catalog's machine: SkyPilot's optimizer picks the cheapest machine with
    them (and prints its price before it launches). For a CPU machine, the cheapest with at least
    its vCPUs and memory: never dearer than it, by SkyPilot's own catalog."""
    if offer.is_cpu:
        return {"cpus": f"{offer.vcpus}+", "memory": f"{offer.memory_gib:g}+"}
    return {"accelerators": f"{service_name('skypilot_accelerator', offer.gpu)}:{offer.count}"}


def spec(
    plan: Plan, environment: dict[str, str], distribution: Distribution, cmd: Commands
) -> dict[str, Any]:
    """The task of the plan: the catalog's machine, the image by digest, the bucket mounted."""
    del distribution, cmd
    assert plan.offer is not None
    resources: dict[str, Any] = {
        "infra": f"{plan.cloud}/{plan.region}" if plan.region else plan.cloud,
        **_machine(plan.offer),
        "use_spot": plan.spot,
        "image_id": f"docker:{plan.image}",
        "disk_size": 200,
        # A preempted spot job is relaunched in the next region with capacity; a job that
        # fails in its own code is not rerun.
        "job_recovery": {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 0},
        "labels": plan.labels,
    }
    return {
        "name": plan.job,
        "num_nodes": plan.nodes,
        "resources": resources,
        "envs": environment,
        "file_mounts": {MOUNT: {"source": f"{plan.bucket}/outputs", "mode": "MOUNT"}},
        "run": run_script(plan),
    }


def run_script(plan: Plan) -> str:
    """The task's command, stopped at the run's deadline: SkyPilot has no time limit of its own,
    and a relaunched job gets only what is left. SIGTERM lets the trainer checkpoint; the job
    then ends (exit 124, not rerun) and SkyPilot takes its nodes down."""
    deadline = int(plan.deadline_time.timestamp())
    return (
        f"left=$(( {deadline} - $(date +%s) )); "
        '[ "$left" -gt 0 ] || { echo "the run is past its deadline" >&2; exit 124; }; '
        f'exec timeout --signal=TERM --kill-after={KILL_AFTER_S} "$left" '
        + shlex.join(plan.container)
    )


def submit(plan: Plan, path: str, cmd: Commands) -> dict[str, Any]:
    cmd.run(["sky", "jobs", "launch", "--yes", "--detach-run", "--name", plan.job, path])
    return {"job": plan.job}


def describe(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> dict[str, Any]:
    """The job's row of `sky jobs queue` (a table: ID, TASK, NAME, ..., STATUS)."""
    del settings
    listing = cmd.run(["sky", "jobs", "queue"], quiet=True)
    for line in listing.stdout.splitlines():
        words = line.split()
        if record["job"] in words:
            status = next((word for word in words if word in STATES), "?")
            return {"state": STATES.get(status, "?"), "detail": status, "nodes": None}
    raise CloudError(f"sky jobs queue lists no job {record['job']} (sky jobs queue --all-users?)")


def cancel(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> None:
    del settings
    cmd.run(["sky", "jobs", "cancel", "--yes", "--name", record["job"]])
