"""SkyPilot managed jobs (invoke train --cloud=aws|gcp|azure --backend=skypilot): one task file,
launched with `sky jobs launch`, for teams that already run SkyPilot.

SkyPilot's jobs controller starts the nodes, relaunches a preempted spot job and tears it all
down at the end. The image runs as the task's runtime (`image_id: docker:...`), each node runs
the launcher (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS), and the run folder is the run's bucket
prefix mounted at /outputs, so a relaunched job resumes from its last checkpoint.

With --cloud=any the task names no cloud: SkyPilot picks among every cloud it has enabled (sky
check). The image and the bucket stay on the home cloud (cloud.toml's [skypilot] home).

Every task carries `max_hourly_cost`, the node's rate the plan's cap counts: SkyPilot considers
only machines at or below it in its own catalog (its spot price with use_spot; 0.14.1's
sky/catalog/common.py), so the optimizer's other choices (another machine with these GPUs,
another region, another cloud) never cost more an hour than the summary says.

SkyPilot pulls a private image only with its three login variables (registry_login). With an
empty password it logs in as the VM itself where it knows how (0.14.1's
sky/provision/docker_utils.py): ECR through `aws ecr get-login-password` (on any cloud: SkyPilot
installs the AWS CLI and uploads this machine's AWS credentials), Artifact Registry through
`gcloud auth configure-docker` (only a GCP VM has gcloud). Where that cannot work (ACR, and
Artifact Registry with --cloud=any), a pull-only token (pull_tokens.py: never the user's own
credentials) is handed to `sky jobs launch --secret`, read from its environment, never written in
the task file or printed; the task's command unsets the three before training starts.
Facts: SkyPilot 0.14.1's task schema and environment (docs.skypilot.co, and its source).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from ..catalog import Offer, service_name
from ..commands import CloudError, Commands
from ..plan import Plan
from . import pull_tokens

if TYPE_CHECKING:
    from .common import Distribution

MOUNT = "/outputs"
LOGIN = ("SKYPILOT_DOCKER_USERNAME", "SKYPILOT_DOCKER_PASSWORD", "SKYPILOT_DOCKER_SERVER")
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


def registry_login(image: str, anywhere: bool = False) -> dict[str, str]:
    """The login variables of the image's registry where the VM's own identity pulls from it
    (ECR; Artifact Registry unless --cloud=any); none for another registry (public, or one
    whose token launch_secrets hands over)."""
    server = image.split("/", 1)[0]
    if ".dkr.ecr." in server and server.endswith(".amazonaws.com"):
        return dict(zip(LOGIN, ("AWS", "", server), strict=True))
    if server.endswith("-docker.pkg.dev") and not anywhere:
        return dict(zip(LOGIN, (pull_tokens.GAR_TOKEN_USER, "", server), strict=True))
    return {}


def _needs_token(image: str, anywhere: bool) -> bool:
    """Whether the VM cannot log in to the image's registry as itself (registry_login)."""
    server = image.split("/", 1)[0]
    return server.endswith(".azurecr.io") or (server.endswith("-docker.pkg.dev") and anywhere)


def launch_secrets(plan: Plan, cmd: Commands) -> tuple[list[str], dict[str, str]]:
    """`--secret NAME` flags for `sky jobs launch` and their values, for an image the VM cannot
    pull as itself: the values travel in the command's environment, never on its command line."""
    if not _needs_token(plan.image, bool(plan.anywhere)):
        return [], {}
    user, token = pull_tokens.token(plan, cmd)
    cmd.secrets.append(token)
    values = dict(zip(LOGIN, (user, token, plan.image.split("/", 1)[0]), strict=True))
    return [flag for name in LOGIN for flag in ("--secret", name)], values


def notes(plan: Plan) -> list[tuple[str, str]]:
    """Rows the plan's summary adds for SkyPilot: a pull token's lifetime, where there is one."""
    if not _needs_token(plan.image, bool(plan.anywhere)):
        return []
    server = plan.image.split("/", 1)[0]
    words = (f"with a pull-only token of {server} that lasts {pull_tokens.hours(plan):g} h: a "
             "spot job SkyPilot relaunches later than that cannot pull the image (cloudgpu "
             "docs/clouds.md: SkyPilot)")  # fmt: skip
    return [("image pull", words)]


def bound(offers: tuple[Offer, ...], spot: bool) -> tuple[float, str]:
    """--cloud=any's USD per hour of a node, at most, and what it is: the dearest on-demand
    rate of the catalog's machine on each of its clouds (a spot hour bills no more)."""
    dearest = max(offers, key=lambda offer: offer.on_demand)
    return dearest.on_demand, (
        f"SkyPilot takes the cheapest{' spot' if spot else ''} machine it finds on the clouds "
        f"it has enabled, none above {dearest.cloud} {dearest.machine}'s ${dearest.on_demand:.3f}"
        f"/h on-demand a node ({dearest.source})"
    )


def _machine(plan: Plan) -> dict[str, Any]:
    """The GPUs, not the catalog's machine: SkyPilot's optimizer picks the cheapest machine with
    them (and prints its price before it launches). For a CPU machine, the cheapest with at least
    its vCPUs and memory (with --cloud=any, the least of the catalog's machines on each cloud)."""
    offer = plan.offer
    assert offer is not None
    if offer.is_cpu:
        vcpus, memory = plan.cpus_asked
        return {"cpus": f"{vcpus}+", "memory": f"{memory:g}+"}
    return {"accelerators": f"{service_name('skypilot_accelerator', offer.gpu)}:{offer.count}"}


def spec(
    plan: Plan, environment: dict[str, str], distribution: Distribution, cmd: Commands
) -> dict[str, Any]:
    """The task of the plan: the catalog's machine, the image by digest, the bucket mounted."""
    del distribution, cmd
    assert plan.offer is not None
    assert plan.worst_node_price is not None  # the catalog has every offer's on-demand rate
    where = f"{plan.cloud}/{plan.region}" if plan.region else plan.cloud
    resources: dict[str, Any] = {
        **({} if plan.anywhere else {"infra": where}),
        **_machine(plan),
        "use_spot": plan.spot,
        "max_hourly_cost": plan.worst_node_price,  # the plan's cap, kept by SkyPilot
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
        "envs": {**environment, **registry_login(plan.image, bool(plan.anywhere))},
        "file_mounts": {MOUNT: {"source": f"{plan.bucket}/outputs", "mode": "MOUNT"}},
        "run": run_script(plan),
    }


def run_script(plan: Plan) -> str:
    """The task's command, stopped at the run's deadline: SkyPilot has no time limit of its own,
    and a relaunched job gets only what is left. SIGTERM lets the trainer checkpoint; the job
    then ends (exit 124, not rerun) and SkyPilot takes its nodes down. The registry login's
    variables, SkyPilot's to pull the image, never reach the training code."""
    deadline = int(plan.deadline_time.timestamp())
    return (
        f"unset {' '.join(LOGIN)}; left=$(( {deadline} - $(date +%s) )); "
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
