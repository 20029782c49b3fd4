"""Google Cloud: a plan as `gcloud` command lines. Compute Engine for the VM (spot or standard,
deleted when preempted or past its run duration), Artifact Registry for the image, Cloud Storage
for the outputs, Secret Manager for secrets, a service account as the VM's identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..commands import CloudError, Commands
from ..plan import DISK_GB, LABEL_PREFIX, Plan
from ..settings import NEEDED
from .gcp_identity import email, ensure, role_id
from .gcp_quota import quota_problem as quota_problem


def _gcloud(settings: dict[str, Any], *args: str) -> list[str]:
    return ["gcloud", *args, f"--project={settings['project']}", "--format=json"]


def need_project(settings: dict[str, Any]) -> None:
    if not settings.get("project"):
        raise CloudError(NEEDED["gcp"]["project"])


def ensure_repository(settings: dict[str, Any], cmd: Commands) -> str:
    """The project's Artifact Registry repository (made on first use): host/project/repository."""
    need_project(settings)
    name, region = settings["project_name"], settings["region"]
    found = cmd.run(
        _gcloud(settings, "artifacts", "repositories", "describe", name, f"--location={region}"),
        check=False,
    )
    if found.returncode != 0 and not cmd.dry_run:
        cmd.run(
            _gcloud(
                settings,
                "artifacts",
                "repositories",
                "create",
                name,
                "--repository-format=docker",
                f"--location={region}",
                f"--labels={LABEL_PREFIX}-managed=true",
            )
        )
    return f"{registry(settings)}/{settings['project']}/{name}"


def ensure_identity(
    settings: dict[str, Any], bucket: str, image: str, cmd: Commands, vms: bool = True
) -> str:
    """The service account of the VMs (or, not `vms`, of Vertex jobs): the project's own, scoped
    to what a run does (gcp_identity)."""
    need_project(settings)
    return ensure(settings, bucket, image, cmd, vms)


def registry(settings: dict[str, Any]) -> str:
    return f"{settings['region']}-docker.pkg.dev"


def lasting(plan_bucket: str, settings: dict[str, Any], backend: str = "vm") -> list[str]:
    """What a run makes on first use that stays after it (each run reuses them)."""
    bucket = plan_bucket.removeprefix("gs://").split("/", 1)[0]
    made = [
        f"Cloud Storage bucket {bucket}: the runs' outputs, billed per GB-month stored",
        f"Artifact Registry repository {settings['project_name']} in {settings['region']}: the "
        "images, billed per GB-month stored",
    ]
    if backend == "skypilot" or settings.get("service_account", "") not in ("", email(settings)):
        return made
    what = (
        f"service account {email(settings)} and custom role {role_id(settings['project_name'])}"
        if backend == "vm"
        else f"service account {email(settings)}"
    )
    scope = "bucket prefix, secrets, repository and VMs"
    return [*made, f"{what}: the runs' identity, its grants scoped to the project's {scope}"]


def own_registry(host: str, settings: dict[str, Any]) -> bool:
    """Whether `host` is Artifact Registry's, the only host the VM's credentials may go to."""
    return host.endswith("-docker.pkg.dev")


def docker_login(settings: dict[str, Any], cmd: Commands, docker: str) -> None:
    del docker  # gcloud writes the credential helper into docker's own config
    cmd.run(["gcloud", "auth", "configure-docker", registry(settings), "--quiet"])


def ensure_bucket(settings: dict[str, Any], cmd: Commands) -> str:
    """The runs' bucket, made on first use (uniform access, public access prevented). The
    default name (<project>-<slug>) can be guessed, so a bucket of that name must belong to the
    project: one made first by someone else, to read what runs write, is refused."""
    need_project(settings)
    bucket = settings["bucket"].rstrip("/")
    name = bucket.removeprefix("gs://").split("/", 1)[0]
    found = cmd.run(
        _gcloud(settings, "storage", "buckets", "describe", f"gs://{name}", "--raw"), check=False
    )
    if found.returncode != 0 and not cmd.dry_run:
        cmd.run(
            _gcloud(
                settings,
                "storage",
                "buckets",
                "create",
                f"gs://{name}",
                f"--location={settings['region']}",
                "--uniform-bucket-level-access",
                "--public-access-prevention",
            )
        )
    elif found.returncode == 0 and not cmd.dry_run and name == default_bucket(settings):
        owner = str(json.loads(found.stdout or "{}").get("projectNumber", ""))
        number = project_number(settings, cmd)
        if owner and number and owner != number:
            raise CloudError(
                f"bucket gs://{name} belongs to another Google Cloud project (number {owner}, "
                f"not {settings['project']}'s {number}): set bucket = under [gcp] in cloud.toml "
                "to one of yours"
            )
    return bucket


def default_bucket(settings: dict[str, Any]) -> str:
    return f"{settings['project']}-{settings['project_name']}"


def project_number(settings: dict[str, Any], cmd: Commands) -> str:
    done = cmd.run(["gcloud", "projects", "describe", settings["project"], "--format=json"])
    return str(json.loads(done.stdout or "{}").get("projectNumber", ""))


def labels(plan: Plan) -> str:
    return ",".join(f"{key}={value}" for key, value in plan.labels.items())


def create_command(plan: Plan, script: str) -> list[str]:
    """`gcloud compute instances create` for the plan; `script` is the startup-script file."""
    from ..machines import boot_image

    assert plan.offer is not None
    image = boot_image(plan.offer)
    settings = plan.settings
    # N1 hosts take the GPU as an accelerator; g2, a2 and a3 machine types have it built in.
    accelerator = plan.offer.accelerator
    attach = [f"--accelerator=type={accelerator},count={plan.offer.count}"] if accelerator else []
    command = [
        "gcloud",
        "compute",
        "instances",
        "create",
        plan.run_id,
        f"--project={settings['project']}",
        f"--zone={plan.zone}",
        f"--machine-type={plan.offer.machine}",
        *attach,
        # GPUs cannot live-migrate: the VM stops for host maintenance instead.
        "--maintenance-policy=TERMINATE",
        f"--provisioning-model={'SPOT' if plan.spot else 'STANDARD'}",
        # Preempted, or past --max-run-duration: deleted, with its disk, not left stopped.
        "--instance-termination-action=DELETE",
        f"--max-run-duration={int(plan.max_hours * 3600)}s",
        f"--image-family={image['family']}",
        f"--image-project={image['project']}",
        f"--boot-disk-size={DISK_GB}GB",
        # No project-wide SSH keys reach the VM; SSH, if ever, goes through OS Login and IAM.
        "--metadata="
        + ("" if plan.offer.is_cpu else "install-nvidia-driver=True,")
        + "block-project-ssh-keys=TRUE,enable-oslogin=TRUE",
        f"--metadata-from-file=startup-script={script}",
        f"--labels={labels(plan)}",
        "--scopes=cloud-platform",
        "--format=json",
    ]
    if settings.get("service_account"):
        command.append(f"--service-account={settings['service_account']}")
    if settings.get("subnet"):
        command += [
            f"--network={settings.get('network') or 'default'}",
            f"--subnet={settings['subnet']}",
        ]
    if not settings.get("public_ip", True):  # egress through Cloud NAT; Private Google Access
        command.append("--no-address")
    if plan.spot:
        command.append("--no-restart-on-failure")
    if plan.monitor:  # the IAP firewall rule admits tunnels to VMs with this tag
        from ..vm.tunnels import NETWORK_TAG

        command.append(f"--tags={NETWORK_TAG}")
    return command


def ensure_monitor_firewall(settings: dict[str, Any], cmd: Commands) -> None:
    """The rules that let IAP's TCP forwarding, and nothing else, reach the metrics ports."""
    from ..vm.tunnels import firewall_rules

    for name, create in firewall_rules(settings).items():
        found = cmd.run(
            _gcloud(settings, "compute", "firewall-rules", "describe", name), check=False
        )
        if found.returncode != 0 and not cmd.dry_run:
            cmd.run(create)


def zones(settings: dict[str, Any], cmd: Commands) -> list[str]:
    """The region's zones the catalog lists, to try one after another for capacity."""
    from ..catalog import load

    region = settings["region"]
    return [zone for zone in load()["clouds"]["gcp"].get("zones", []) if zone.startswith(region)]


def launch(plan: Plan, script: str, cmd: Commands) -> dict[str, Any]:
    if plan.monitor:
        ensure_monitor_firewall(plan.settings, cmd)
    need_project(plan.settings)
    cmd.run(create_command(plan, script), dry_answer="[]")
    return {"instance": plan.run_id, "zone": plan.zone}


def runs(settings: dict[str, Any], cmd: Commands) -> list[dict[str, Any]]:
    need_project(settings)
    done = cmd.run(
        _gcloud(
            settings, "compute", "instances", "list", f"--filter=labels.{LABEL_PREFIX}-managed=true"
        ),
        dry_answer="[]",
    )
    found = []
    for instance in json.loads(done.stdout or "[]"):
        labels = instance.get("labels", {})
        found.append(
            {
                "run": labels.get(f"{LABEL_PREFIX}-run", instance["name"]),
                "id": instance["name"],
                "zone": instance["zone"].rsplit("/", 1)[-1],
                "state": instance["status"].lower(),
                "machine": instance["machineType"].rsplit("/", 1)[-1],
                "spot": instance.get("scheduling", {}).get("provisioningModel") == "SPOT",
                "started": instance.get("creationTimestamp", ""),
                "deadline": labels.get(f"{LABEL_PREFIX}-deadline", ""),
            }
        )
    return found


def delete(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> None:
    name = record.get("instance") or record.get("id") or record["run"]  # VMs bear the run's id
    zone = record.get("zone") or settings["zone"]
    cmd.run(
        _gcloud(settings, "compute", "instances", "delete", str(name), f"--zone={zone}", "--quiet")
    )


def read_text(uri: str, settings: dict[str, Any], cmd: Commands) -> str | None:
    done = cmd.run(["gcloud", "storage", "cat", uri], check=False, quiet=True)
    return done.stdout if done.returncode == 0 else None


def copy_up(local: str, uri: str, settings: dict[str, Any], cmd: Commands) -> None:
    """A file, or a folder's files, to the bucket."""
    if Path(local).is_dir():
        cmd.run(["gcloud", "storage", "rsync", "--recursive", local, uri])
    else:
        cmd.run(["gcloud", "storage", "cp", local, uri])


def copy_down(uri: str, local: str, settings: dict[str, Any], cmd: Commands) -> None:
    """A folder of the bucket, here (what changed since the last copy)."""
    Path(local).mkdir(parents=True, exist_ok=True)
    cmd.run(["gcloud", "storage", "rsync", "--recursive", uri, local])
