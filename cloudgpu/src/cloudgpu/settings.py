"""Where a cloud run goes: project, account, region, zone, bucket, identity.

Each value comes from the project's cloud.toml where it is set there, else from the cloud's own
CLI configuration (read locally: `gcloud config get-value`, `aws configure get`, `az account
show`), else a default made from the project's name. Nothing here calls a cloud's API.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

from .commands import CloudError
from .project import ROOT

# The project's cloud.toml; CLOUD_SETTINGS names another file (a team's, a test's).
SETTINGS = Path(os.environ.get("CLOUD_SETTINGS") or ROOT / "cloud.toml")
DEFAULT_REGION = {"aws": "us-east-1", "gcp": "us-central1", "azure": "eastus"}


def _cli_value(*argv: str) -> str:
    """What a CLI prints for a local setting; empty when the CLI or the setting is missing."""
    if shutil.which(argv[0]) is None:
        return ""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return ""
    value = done.stdout.strip()
    return value if done.returncode == 0 and value not in ("(unset)", "None") else ""


# The settings a real run of a cloud cannot go without, and how to give each: a dry run shows a
# <placeholder> instead, then this list (with_placeholders).
NEEDED = {
    "gcp": {
        "project": "no Google Cloud project: gcloud config set project PROJECT, or project = ... "
        "under [gcp] in cloud.toml",
    },
    "azure": {
        "storage_account": "no Azure storage account for the run's outputs: set storage_account "
        '(and bucket = "az://container") under [azure] in cloud.toml',
        "identity": "no managed identity for the VM: create a user-assigned identity with AcrPull "
        "on the registry, Storage Blob Data Contributor on the storage account and Key Vault "
        "Secrets User, and set identity = under [azure] (each run grants it Contributor on its "
        "own group)",
    },
}


def with_placeholders(cloud: str, settings: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """For a dry run: `settings` with `<name>` for each NEEDED one missing, and what a real run
    needs first, so that the whole plan prints without any settings."""
    missing = {key: text for key, text in NEEDED.get(cloud, {}).items() if not settings.get(key)}
    filled = {**settings, **{key: f"<{key}>" for key in missing}}
    if cloud == "gcp" and not settings.get("bucket"):
        filled["bucket"] = f"gs://<project>-{settings['project_name']}"
    return filled, list(missing.values())


def _s3_uris(value: Any, key: str) -> list[str]:
    """cloud.toml's list of s3:// URIs under `key`, or CloudError naming what is wrong."""
    if not isinstance(value, list) or not all(
        isinstance(uri, str) and uri.startswith("s3://") and len(uri) > 5 for uri in value
    ):
        raise CloudError(
            f"cloud.toml [aws] {key} = {value!r}: give a list of s3:// URIs, "
            'e.g. ["s3://datasets/imagenet"]'
        )
    return value


def _network(cloud: str, given: dict[str, Any], prefix: str) -> dict[str, Any]:
    """cloud.toml's `subnet` (the VMs join it) and `public_ip` (false: no public address, for a
    private subnet whose egress goes through NAT), or CloudError naming what is wrong."""
    subnet, public = given.get("subnet", ""), given.get("public_ip", True)
    if not isinstance(subnet, str) or (subnet and not subnet.startswith(prefix)):
        example = {"aws": "subnet-0123456789abcdef0", "gcp": "runs (or its projects/... path)"}
        raise CloudError(
            f"cloud.toml [{cloud}] subnet = {subnet!r}: give a subnet's id, e.g. "
            f"{example.get(cloud, '/subscriptions/.../subnets/runs')}"
        )
    if not isinstance(public, bool):
        raise CloudError(f"cloud.toml [{cloud}] public_ip = {public!r}: give true or false")
    if not public and not subnet:
        raise CloudError(
            f"cloud.toml [{cloud}] public_ip = false needs subnet = ...: a private subnet whose "
            "egress (registry, bucket, secrets) goes through NAT or private endpoints"
        )
    return {"subnet": subnet, "public_ip": public}


def _tables() -> dict[str, Any]:
    """cloud.toml's tables (none where there is no cloud.toml)."""
    return tomllib.loads(SETTINGS.read_text(encoding="utf-8")) if SETTINGS.exists() else {}


def skypilot_home(default: str) -> str:
    """Where a --cloud=any run keeps its image and outputs (cloud.toml's [skypilot] home, else
    `default`): SkyPilot picks where it runs, but the registry and the bucket are one cloud's."""
    home = _tables().get("skypilot", {}).get("home", default)
    if home not in DEFAULT_REGION:
        raise CloudError(
            f"cloud.toml [skypilot] home = {home!r}: choose the cloud whose registry and bucket "
            f"a --cloud=any run uses: {', '.join(DEFAULT_REGION)}"
        )
    return str(home)


def load(cloud: str, project: str) -> dict[str, Any]:
    """The settings of `cloud` for the project named `project` (its slug)."""
    table = _tables()
    given = dict(table.get(cloud, {}))
    settings: dict[str, Any] = {"project_name": project, "secrets": dict(table.get("secrets", {}))}
    if cloud == "aws":
        region = (
            given.get("region")
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or _cli_value("aws", "configure", "get", "region")
            or DEFAULT_REGION["aws"]
        )
        settings |= {
            "region": region,
            "bucket": given.get("bucket", ""),  # default from the account: aws.bucket()
            "data_buckets": _s3_uris(given.get("data_buckets", []), "data_buckets"),  # read-only
            "instance_profile": given.get("instance_profile", f"{project}-runner"),
            "image": given.get("image", ""),  # an AMI id, to pin one instead of the newest DLAMI
            "sagemaker_role": given.get("sagemaker_role", ""),  # default: <project>-sagemaker
            **_network(cloud, given, "subnet-"),
        }
    elif cloud == "gcp":
        gcp_project = given.get("project") or _cli_value("gcloud", "config", "get-value", "project")
        region = (
            given.get("region")
            or _cli_value("gcloud", "config", "get-value", "compute/region")
            or DEFAULT_REGION["gcp"]
        )
        zone = given.get("zone") or _cli_value("gcloud", "config", "get-value", "compute/zone")
        settings |= {
            "project": gcp_project,
            "region": region,
            "zone": zone or f"{region}-a",
            "bucket": given.get("bucket")
            or (f"gs://{gcp_project}-{project}" if gcp_project else ""),
            "service_account": given.get("service_account", ""),
            "network": given.get("network", "default"),  # the VPC of `subnet` and of the rules
            **_network(cloud, given, ""),
        }
    elif cloud == "azure":
        settings |= {
            "subscription": given.get("subscription")
            or _cli_value("az", "account", "show", "--query", "id", "--output", "tsv"),
            "resource_group": given.get("resource_group", project),
            "location": given.get("location") or given.get("region") or DEFAULT_REGION["azure"],
            "storage_account": given.get("storage_account", ""),
            "bucket": given.get("bucket", "az://runs"),
            "identity": given.get("identity", ""),
            "registry": given.get("registry", ""),  # an ACR's name; default: azure.registry_name
            "key_vault": given.get("key_vault", ""),
            "workspace": given.get("workspace", project),  # Azure ML's, for --backend=managed
            "datastore": given.get("datastore", ""),  # default: <project>_runs, over `bucket`
            **_network(cloud, given, "/subscriptions/"),  # (--monitor needs a subnet)
            "bastion": given.get("bastion", ""),  # the Bastion of that network, for tunnels
            "bastion_group": given.get("bastion_group", ""),
        }
    else:  # local
        settings |= {
            "bucket": given.get("bucket", ""),
            "registry": given.get("registry", ""),
            # An EC2-style metadata service to watch for spot notices (a stand-in, in the tests).
            "metadata_url": given.get("metadata_url", ""),
        }
    return settings
