"""Vertex AI custom jobs (invoke train --cloud=gcp --backend=managed): one CustomJobSpec file,
sent with `gcloud ai custom-jobs create --config`.

Worker pool 0 is the first node (one replica), pool 1 the others; every node runs the image's
launcher, which reads CLUSTER_SPEC. The run folder is the bucket itself, through the Cloud Storage
FUSE mount every custom job has at /gcs/<bucket>, so a restarted job (spot, a worker restart)
resumes from its last checkpoint. Facts: the Vertex AI docs "Distributed training" and "Use
Cloud Storage as a mounted file system" (read 2026-12-01).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from .. import machines
from ..catalog import Offer, service_name
from ..commands import CloudError, Commands
from ..plan import Plan, PlanError
from ..providers.gcp import labels, need_project

if TYPE_CHECKING:
    from .common import Distribution

DISK_GB = 100
STATES = {  # JobState -> how a VM run's status.json says it
    "JOB_STATE_QUEUED": "pending",
    "JOB_STATE_PENDING": "pending",
    "JOB_STATE_RUNNING": "running",
    "JOB_STATE_SUCCEEDED": "finished",
    "JOB_STATE_FAILED": "failed",
    "JOB_STATE_CANCELLING": "stopping",
    "JOB_STATE_CANCELLED": "stopped",
    "JOB_STATE_EXPIRED": "timeout",
}
SPEC = "vertex-job.yaml"
FORMAT = "yaml"


def run_dir(bucket: str) -> str:
    """gs://bucket/prefix -> /gcs/bucket/prefix/outputs/run (the job's FUSE mount)."""
    return f"/gcs/{bucket.removeprefix('gs://')}/outputs/run"


def check(plan: Plan) -> None:
    need_project(plan.settings)
    assert plan.offer is not None
    if plan.offer.is_cpu:
        accepted = machines.service_accepts("managed", "gcp")
        if accepted is not None and plan.offer.machine not in accepted:
            raise PlanError(
                f"--machine {plan.offer.machine}: Vertex AI trains on none of that family; of the "
                f"catalog's CPU machines it takes {', '.join(sorted(accepted))}"
            )
    else:
        service_name("vertex_accelerator", plan.offer.gpu)  # a GPU Vertex names
    if plan.max_hours > 7 * 24:
        raise PlanError(f"--max-hours {plan.max_hours:g}: a Vertex AI job runs 7 days at most")


def machine_spec(offer: Offer) -> dict[str, Any]:
    """A worker's machine: the type, and its GPUs where it has them."""
    if offer.is_cpu:
        return {"machineType": offer.machine}
    return {
        "machineType": offer.machine,
        "acceleratorType": service_name("vertex_accelerator", offer.gpu),
        "acceleratorCount": offer.count,
    }


def spec(
    plan: Plan, environment: dict[str, str], distribution: Distribution, cmd: Commands
) -> dict[str, Any]:
    """The CustomJobSpec of the plan, in gcloud's camelCase."""
    del distribution, cmd
    assert plan.offer is not None
    command, arguments = plan.entrypoint
    pool = {
        "machineSpec": machine_spec(plan.offer),
        "diskSpec": {"bootDiskType": "pd-ssd", "bootDiskSizeGb": DISK_GB},
        "containerSpec": {
            "imageUri": plan.image,
            "command": command,
            "args": arguments,
            "env": [{"name": name, "value": value} for name, value in environment.items()],
        },
    }
    pools = [{**pool, "replicaCount": 1}]
    if plan.nodes > 1:
        pools.append({**pool, "replicaCount": plan.nodes - 1})
    job: dict[str, Any] = {
        "workerPoolSpecs": pools,
        "scheduling": {
            "timeout": f"{int(plan.max_hours * 3600)}s",
            "strategy": "SPOT" if plan.spot else "STANDARD",
            # DDP is not elastic: one node restarted (a spot VM taken back) restarts them all,
            # and every node resumes from the checkpoint in the bucket.
            "restartJobOnWorkerRestart": plan.nodes > 1,
        },
        "baseOutputDirectory": {"outputUriPrefix": f"{plan.bucket}/outputs"},
    }
    if plan.settings.get("service_account"):
        job["serviceAccount"] = plan.settings["service_account"]
    return job


def _gcloud(settings: dict[str, Any], region: str, *args: str) -> list[str]:
    return [
        "gcloud", "ai", "custom-jobs", *args, f"--region={region}",
        f"--project={settings['project']}", "--format=json",
    ]  # fmt: skip


def submit(plan: Plan, path: str, cmd: Commands) -> dict[str, Any]:
    done = cmd.run(
        _gcloud(
            plan.settings, plan.region, "create", f"--display-name={plan.job}",
            f"--config={path}", f"--labels={labels(plan)}",
        ),
        dry_answer=json.dumps({"name": "projects/<project>/locations/<region>/customJobs/<id>"}),
    )  # fmt: skip
    name = _job_name(done.stdout, done.stderr)
    return {"job": name, "job_id": name.rsplit("/", 1)[-1]}


def _job_name(stdout: str, stderr: str) -> str:
    """The job's resource name from what `create` prints: its JSON, or its message."""
    try:
        return str(json.loads(stdout)["name"])
    except (json.JSONDecodeError, KeyError, TypeError):
        found = re.search(r"projects/[^/\s]+/locations/[^/\s]+/customJobs/[\w-]+", stdout + stderr)
    if found:
        return found[0]
    raise CloudError(f"gcloud ai custom-jobs create printed no job name: {stderr.strip()[-300:]}")


def describe(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> dict[str, Any]:
    done = cmd.run(_gcloud(settings, record["region"], "describe", record["job_id"]), quiet=True)
    job = json.loads(done.stdout)
    state = STATES.get(job.get("state", ""), str(job.get("state", "?")).lower())
    pools = job.get("jobSpec", {}).get("workerPoolSpecs", [])
    return {
        "state": state,
        "detail": job.get("state", ""),
        "nodes": sum(int(pool.get("replicaCount", 0)) for pool in pools) or None,
        "failure": job.get("error", {}).get("message", ""),
    }


def cancel(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> None:
    if not record.get("job_id"):
        raise CloudError(f"run {record.get('run')} has no Vertex AI job id")
    cmd.run(_gcloud(settings, record["region"], "cancel", record["job_id"]))
