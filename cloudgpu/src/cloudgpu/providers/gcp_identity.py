"""The identity a project's GCP VMs run as: a service account of the project's own, made on first
use, in place of the default compute service account (often Editor on the whole Google Cloud
project). Its grants, written again at every launch (each is idempotent), are what a run does:

  objects under <bucket>/<project>/ (its outputs and its datasets), and listing the bucket
  the secrets cloud.toml names under [secrets], to read
  the project's Artifact Registry repository, to pull (when the image comes from it)
  deleting a VM whose name starts with the project's (each VM deletes itself at its end)

Nothing under <bucket>/<project>/endpoints/: the deployed models are no run's to replace.
Vertex AI jobs (--backend=managed) run as the same account, without the VM grant: the service
deletes its own machines, and pulls the image with its own service agent. Vertex AI endpoints
run as <project>-endpoint (ensure_endpoint): their own files under endpoints/, nothing else.
A service account cloud.toml names (service_account = under [gcp]) is used as it is.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ..commands import Commands

# The VM deletes itself with `gcloud compute instances delete`, which waits on the operation.
SELF_DELETE_PERMISSIONS = ("compute.instances.delete", "compute.instances.get",
                           "compute.zoneOperations.get")  # fmt: skip
INSTANCE = "compute.googleapis.com/Instance"
INSTANCE_NAME = "/instances/{name}"  # CEL's extract() template: the VM's name
BUCKET_TYPE = 'resource.type == "storage.googleapis.com/Bucket"'


def account_id(project_name: str, role: str = "runner") -> str:
    """<project>-<role> (runner, puller, ...), cut to the 30 characters an account id may have
    (a hash keeps it apart from another long name's)."""
    wanted = re.sub(r"[^a-z0-9-]", "-", project_name.lower()).strip("-")
    name = f"{wanted}-{role}"
    if len(name) > 30:
        digest = hashlib.sha256(project_name.encode()).hexdigest()[:4]
        name = f"{wanted[: 24 - len(role)].rstrip('-')}-{digest}-{role}"
    return name if name[0].isalpha() else f"r{name}"[:30]


def email(settings: dict[str, Any]) -> str:
    return f"{account_id(settings['project_name'])}@{settings['project']}.iam.gserviceaccount.com"


def role_id(project_name: str) -> str:
    """The custom role that lets a VM delete itself: letters, digits and underscores."""
    return re.sub(r"[^A-Za-z0-9_]", "_", project_name)[:40] + "_vm_self_delete"


def conditions(settings: dict[str, Any], bucket_name: str) -> dict[str, str]:
    """The IAM conditions (CEL) of the grants that reach more than one resource."""
    project, objects = settings["project_name"], f"projects/_/buckets/{bucket_name}/objects"
    return {
        # objects.list is checked on the bucket, every other object permission on the object.
        # The endpoints' models and samples are no run's to touch (a run must not replace them).
        "storage": f'{BUCKET_TYPE} || (resource.name.startsWith("{objects}/{project}/") && '
        f'!resource.name.startsWith("{objects}/{project}/endpoints/"))',
        # An endpoint reads its model and adds its samples: under endpoints/ only.
        "endpoint": f'{BUCKET_TYPE} || resource.name.startsWith("{objects}/{project}/endpoints/")',
        # zoneOperations.get, for the delete's wait, is checked on the operation.
        "self-delete": f'resource.type != "{INSTANCE}" || '
        f'resource.name.extract("{INSTANCE_NAME}").startsWith("{project}-")',
    }


def _condition(expression: str, title: str) -> str:
    return f"--condition=expression={expression},title={title}"


def ensure_account(settings: dict[str, Any], role: str, purpose: str, cmd: Commands) -> str:
    """The email of the project's service account <project>-<role>, made where it is missing."""
    project, name = settings["project"], account_id(settings["project_name"], role)
    account = f"{name}@{project}.iam.gserviceaccount.com"
    found = cmd.run(["gcloud", "iam", "service-accounts", "describe", account,
                     f"--project={project}", "--format=json"], check=False)  # fmt: skip
    if found.returncode != 0 or cmd.dry_run:
        cmd.run(["gcloud", "iam", "service-accounts", "create", name, f"--project={project}",
                 f"--display-name={settings['project_name']} {purpose}",
                 "--format=json"])  # fmt: skip
    return account


def ensure(
    settings: dict[str, Any], bucket: str, image: str, cmd: Commands, vms: bool = True
) -> str:
    """The service account the run's VM (`vms`) or Vertex job gets, with its grants; a dry run
    shows every step."""
    if settings.get("service_account"):
        return str(settings["service_account"])
    project, name = settings["project"], settings["project_name"]
    account = ensure_account(settings, "runner", "runs (invoke train)", cmd)
    member = f"--member=serviceAccount:{account}"
    role = role_id(name)
    role_found = (
        cmd.run(
            ["gcloud", "iam", "roles", "describe", role, f"--project={project}", "--format=json"],
            check=False,
        )
        if vms
        else None
    )
    if role_found is not None and (role_found.returncode != 0 or cmd.dry_run):
        cmd.run(["gcloud", "iam", "roles", "create", role, f"--project={project}",
                 f"--title={name} VMs delete themselves",
                 f"--permissions={','.join(SELF_DELETE_PERMISSIONS)}", "--stage=GA",
                 "--format=json"])  # fmt: skip
    bucket_name = bucket.removeprefix("gs://").split("/", 1)[0]
    limits = conditions(settings, bucket_name)
    grants = [
        ["storage", "buckets", "add-iam-policy-binding", f"gs://{bucket_name}", member,
         "--role=roles/storage.objectUser",
         _condition(limits["storage"], f"{name} prefix but endpoints")],
    ]  # fmt: skip
    if vms:
        grants.append(["projects", "add-iam-policy-binding", project, member,
                       f"--role=projects/{project}/roles/{role}",
                       _condition(limits["self-delete"], f"{name} VMs only")])  # fmt: skip
    repository = f"{settings['region']}-docker.pkg.dev/{project}/{name}"
    if vms and (image.startswith(f"{repository}@") or image.startswith(f"{repository}:")):
        grants.append(["artifacts", "repositories", "add-iam-policy-binding", name,
                       f"--location={settings['region']}", member,
                       "--role=roles/artifactregistry.reader", "--condition=None"])  # fmt: skip
    for secret in sorted(set(settings.get("secrets", {}).values())):
        reader = "--role=roles/secretmanager.secretAccessor"
        grants.append(["secrets", "add-iam-policy-binding", str(secret), member, reader,
                       "--condition=None"])  # fmt: skip
    # --condition on every grant: gcloud asks for one where a policy already has conditions.
    for grant in grants:
        project_flag = [] if grant[0] == "projects" else [f"--project={project}"]
        cmd.run(["gcloud", *grant, *project_flag, "--format=json"])
    # The grant of earlier versions reached the endpoints' models too: gone once its successor
    # is there (none to remove on a project that never had it).
    cmd.run(["gcloud", "storage", "buckets", "remove-iam-policy-binding", f"gs://{bucket_name}",
             member, "--role=roles/storage.objectUser", _condition(
                 f'{BUCKET_TYPE} || resource.name.startsWith("projects/_/buckets/{bucket_name}'
                 f'/objects/{name}/")', f"{name} prefix"), f"--project={project}", "--format=json"],
            check=False, quiet=True)  # fmt: skip
    return account


def ensure_endpoint(settings: dict[str, Any], bucket: str, cmd: Commands) -> str:
    """The account the project's endpoints run as (they sample to the bucket): it reads and adds
    objects under <project>/endpoints/, and nothing else; adding cannot replace a model, which
    takes the delete permission it lacks."""
    if settings.get("endpoint_service_account"):
        return str(settings["endpoint_service_account"])
    account = ensure_account(settings, "endpoint", "endpoints (invoke deploy)", cmd)
    bucket_name = bucket.removeprefix("gs://").split("/", 1)[0]
    scope = _condition(conditions(settings, bucket_name)["endpoint"],
                       f"{settings['project_name']} endpoints")  # fmt: skip
    for role in ("roles/storage.objectViewer", "roles/storage.objectCreator"):
        cmd.run(["gcloud", "storage", "buckets", "add-iam-policy-binding", f"gs://{bucket_name}",
                 f"--member=serviceAccount:{account}", f"--role={role}", scope,
                 f"--project={settings['project']}", "--format=json"])  # fmt: skip
    return account
