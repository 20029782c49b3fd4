"""SkyPilot managed jobs (invoke train --cloud=aws|gcp|azure --backend=skypilot): one task file,
launched with `sky jobs launch`, for teams that already run SkyPilot.

SkyPilot's jobs controller starts the nodes, relaunches a preempted spot job and tears it all
down at the end. The image runs as the task's runtime (`image_id: docker:...`), each node runs
the launcher (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS), and the run folder is the run's bucket
prefix mounted at /outputs, so a relaunched job resumes from its last checkpoint.

SkyPilot pulls a private image only with its three login variables (registry_login). With an
empty password it logs in as the VM itself where it knows how (0.14.1's
sky/provision/docker_utils.py): ECR through `aws ecr get-login-password`, Artifact Registry
through `gcloud auth configure-docker`. ACR has no such path: a token of `az acr login
--expose-token` (valid 3 hours) is handed to `sky jobs launch --secret`, read from its
environment, and never written in the task file or printed.
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
LOGIN = ("SKYPILOT_DOCKER_USERNAME", "SKYPILOT_DOCKER_PASSWORD", "SKYPILOT_DOCKER_SERVER")
ACR_TOKEN_USER = "00000000-0000-0000-0000-000000000000"  # the user name an ACR token goes with
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


def registry_login(image: str) -> dict[str, str]:
    """The login variables of the image's registry where the VM's own identity pulls from it
    (ECR, Artifact Registry); none for another registry (public, or ACR: launch_secrets)."""
    server = image.split("/", 1)[0]
    if ".dkr.ecr." in server and server.endswith(".amazonaws.com"):
        return dict(zip(LOGIN, ("AWS", "", server), strict=True))
    if server.endswith("-docker.pkg.dev"):
        return dict(zip(LOGIN, ("oauth2accesstoken", "", server), strict=True))
    return {}


def launch_secrets(plan: Plan, cmd: Commands) -> tuple[list[str], dict[str, str]]:
    """`--secret NAME` flags for `sky jobs launch` and their values, for an image in ACR: the
    values travel in the command's environment, never on its command line."""
    server = plan.image.split("/", 1)[0]
    if not server.endswith(".azurecr.io"):
        return [], {}
    asked = ["az", "acr", "login", "--name", server.removesuffix(".azurecr.io"), "--expose-token",
             "--query", "accessToken", "--output", "tsv"]  # fmt: skip
    token = cmd.run(asked, dry_answer="<an ACR token>", quiet=True).stdout.strip()
    cmd.secrets.append(token)
    values = dict(zip(LOGIN, (ACR_TOKEN_USER, token, server), strict=True))
    return [flag for name in LOGIN for flag in ("--secret", name)], values


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
        "envs": {**environment, **registry_login(plan.image)},
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
    flags, values = launch_secrets(plan, cmd)
    cmd.run(["sky", "jobs", "launch", "--yes", "--detach-run", "--name", plan.job, *flags, path],
            env=values)  # fmt: skip
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
