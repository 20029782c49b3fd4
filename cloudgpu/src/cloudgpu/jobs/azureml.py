"""Azure ML command jobs (invoke train --cloud=azure --backend=managed): one job YAML on
serverless compute, sent with `az ml job create --file` (the `ml` extension of the az CLI).

Azure ML starts one process per node and tells it where it stands (`distribution`, from the
framework's tasks: its environment variables for a rendezvous, or the cluster of workers); the
image's launcher starts training from there. The run folder is the job's output `run`, mounted
read-write from a datastore over the project's blob container, so it lands in
<bucket>/outputs/run as a VM run's does. Azure ML does not resume a preempted (spot) job:
`invoke train --resume RUN` (or --retries) resubmits it, and the new job resumes from the
checkpoint in that folder. Facts: the Azure ML docs on command jobs and their outputs.
"""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Any

from ..commands import CloudError, Commands
from ..plan import Plan, PlanError

if TYPE_CHECKING:
    from .common import Distribution

SCHEMA = "https://azuremlschemas.azureedge.net/latest/commandJob.schema.json"
DATASTORE_SCHEMA = "https://azuremlschemas.azureedge.net/latest/azureBlob.schema.json"
STATES = {  # Azure ML's job status -> how a VM run's status.json says it
    "NotStarted": "pending",
    "Queued": "pending",
    "Preparing": "pending",
    "Provisioning": "pending",
    "Starting": "pending",
    "Running": "running",
    "Finalizing": "running",
    "Completed": "finished",
    "Failed": "failed",
    "CancelRequested": "stopping",
    "Canceled": "stopped",
    "NotResponding": "failed",
}
SPEC = "azureml-job.yaml"
FORMAT = "yaml"


def run_dir(bucket: str) -> str:
    del bucket
    return "${{outputs.run}}"  # Azure ML writes the mount's path in


def _blob_path(plan: Plan) -> tuple[str, str]:
    """az://container/prefix -> (container, prefix)."""
    container, _, prefix = plan.bucket.removeprefix("az://").partition("/")
    return container, prefix


def check(plan: Plan) -> None:
    if not plan.settings.get("storage_account"):
        raise PlanError(
            "no Azure storage account for the run's outputs: set storage_account under [azure] "
            "in cloud.toml"
        )
    if plan.max_hours > 30 * 24:
        raise PlanError(f"--max-hours {plan.max_hours:g}: give at most 720 hours")


def spec(
    plan: Plan, environment: dict[str, str], distribution: Distribution, cmd: Commands
) -> dict[str, Any]:
    """The command job of the plan; `distribution` is the framework's (tasks.frameworks)."""
    del cmd
    assert plan.offer is not None
    _, prefix = _blob_path(plan)
    return {
        "$schema": SCHEMA,
        "type": "command",
        "display_name": plan.job,  # no name: Azure ML makes a unique one for each submission
        "experiment_name": plan.settings["project_name"],
        "command": shlex.join(["dumb-init", "--", *plan.container]),
        "environment": {"image": plan.image},
        "environment_variables": environment,
        "outputs": {
            "run": {
                "type": "uri_folder",
                "mode": "rw_mount",
                "path": f"azureml://datastores/{datastore(plan.settings)}/paths/{prefix}/outputs/run",
            }
        },
        "resources": {"instance_type": plan.offer.machine, "instance_count": plan.nodes},
        "distribution": distribution(plan.nodes),
        "limits": {"timeout": int(plan.max_hours * 3600)},
        "queue_settings": {"job_tier": "spot" if plan.spot else "standard"},
        "tags": plan.labels,
    }


def datastore(settings: dict[str, Any]) -> str:
    return str(settings.get("datastore") or f"{settings['project_name'].replace('-', '_')}_runs")


def _az_ml(settings: dict[str, Any], *args: str) -> list[str]:
    return [
        "az", "ml", *args, "--resource-group", settings["resource_group"],
        "--workspace-name", settings.get("workspace") or settings["project_name"],
        "--output", "json",
    ]  # fmt: skip


def ensure_datastore(plan: Plan, cmd: Commands) -> None:
    """The workspace's datastore over the bucket's container (made on first use)."""
    settings = plan.settings
    name = datastore(settings)
    found = cmd.run(_az_ml(settings, "datastore", "show", "--name", name), check=False)
    if found.returncode == 0 or cmd.dry_run:
        return
    container, _ = _blob_path(plan)
    document = {
        "$schema": DATASTORE_SCHEMA,
        "name": name,
        "type": "azure_blob",
        "account_name": settings["storage_account"],
        "container_name": container,
    }
    from .common import as_yaml, write_spec

    path = write_spec(plan, "azureml-datastore.yaml", as_yaml(document))
    cmd.run(_az_ml(settings, "datastore", "create", "--file", str(path)))


def submit(plan: Plan, path: str, cmd: Commands) -> dict[str, Any]:
    ensure_datastore(plan, cmd)
    done = cmd.run(
        _az_ml(plan.settings, "job", "create", "--file", str(path)),
        dry_answer='{"name": "<the name Azure ML gives it>"}',
    )
    return {"job": json.loads(done.stdout)["name"]}


def describe(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> dict[str, Any]:
    done = cmd.run(_az_ml(settings, "job", "show", "--name", record["job"]), quiet=True)
    job = json.loads(done.stdout)
    status = str(job.get("status", "?"))
    failure = str((job.get("error") or {}).get("message", ""))
    state = STATES.get(status, status.lower())
    if state == "failed" and "preempt" in failure.lower():  # a spot node taken back
        state = "preempted"
    return {
        "state": state,
        "detail": status,
        "nodes": job.get("resources", {}).get("instance_count"),
        "failure": failure,
    }


def cancel(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> None:
    if not record.get("job"):
        raise CloudError(f"run {record.get('run')} has no Azure ML job name")
    cmd.run(_az_ml(settings, "job", "cancel", "--name", record["job"]))
