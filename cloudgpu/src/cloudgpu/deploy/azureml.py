"""An Azure ML managed online endpoint (invoke deploy --cloud=azure): an endpoint and one
deployment, written as YAML beside the endpoint's record and sent with `az ml online-endpoint
create` and `az ml online-deployment create --all-traffic` (the `ml` extension of the az CLI),
which wait for each. The deployment names the model folder here: az uploads it as a model of
the workspace, and Azure ML mounts it under AZUREML_MODEL_DIR, where the server finds it.

The image's routes are declared in the environment's inference_config (/live, /ready, /score
on 8080). Scaling beyond --min goes through Azure Monitor autoscale, which deploy does not set
up: --max must equal --min here. A create that fails, or is interrupted, deletes the endpoint
(and with it the deployment). The workspace keeps the uploaded model, versioned.

With cloud.toml's `identity`, the endpoint runs as that user-assigned identity, which already
pulls the image (AcrPull) and writes the storage account for the VMs; --sample-rate needs it:
the server writes its samples to the bucket with the identity's token (serving/samples.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..commands import CloudError, Commands
from ..plan import PlanError
from ..settings import NEEDED
from . import common
from .common import RECORDS, Deployment

SERVICE = "Azure ML managed online endpoint"
BUCKET = False  # az uploads the model to the workspace
PARTS = ("endpoint",)  # deleting the endpoint deletes its deployment
DEPLOYMENT = "main"
PORT = 8080
ENDPOINT_SCHEMA = "https://azuremlschemas.azureedge.net/latest/managedOnlineEndpoint.schema.json"
DEPLOYMENT_SCHEMA = (
    "https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json"
)
STATES = {"Succeeded": "serving", "Creating": "creating", "Updating": "updating",
          "Deleting": "deleting", "Failed": "failed", "Canceled": "failed"}  # fmt: skip


def _az_ml(settings: dict[str, Any], *args: str) -> list[str]:
    return ["az", "ml", *args, "--resource-group", settings["resource_group"],
            "--workspace-name", settings["workspace"], "--output", "json"]  # fmt: skip


def check(deployment: Deployment) -> None:
    if deployment.sample_rate and not deployment.settings.get("identity"):
        raise PlanError(f"--sample-rate: the endpoint writes samples as the project's identity; "
                        f"{NEEDED['azure']['identity']}")  # fmt: skip
    if deployment.max_instances != deployment.min_instances:
        raise PlanError(f"--max {deployment.max_instances}: Azure ML endpoints scale through "
                        "Azure Monitor autoscale, which deploy does not set up; give --max equal "
                        "to --min")  # fmt: skip


def upload(settings: dict[str, Any], name: str, folder: str, cmd: Commands) -> None:
    del settings, name, folder, cmd  # `az ml online-deployment create` uploads the folder itself


def samples_uri(settings: dict[str, Any], name: str) -> str:
    """The blob URL of <bucket>/<project>/endpoints/<name>/samples, which the server writes."""
    path = common.samples_uri(settings, name).removeprefix("az://")
    account = settings.get("storage_account") or "<storage_account>"
    return f"https://{account}.blob.core.windows.net/{path}"


def _client_id(settings: dict[str, Any], cmd: Commands) -> str:
    """The identity's client id, which its token request names (a user-assigned identity)."""
    asked = ["az", "identity", "show", "--ids", settings["identity"], "--query", "clientId",
             "--output", "tsv"]  # fmt: skip
    return cmd.run(asked, dry_answer="<client id of the identity>").stdout.strip()


def documents(deployment: Deployment, client_id: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """The endpoint's YAML and the deployment's, as Azure ML's schemas have them; `client_id`:
    the identity's, which the server's sampler uses."""
    tags, settings = deployment.labels, deployment.settings
    endpoint: dict[str, Any] = {"$schema": ENDPOINT_SCHEMA, "name": deployment.name,
                                "auth_mode": "key", "tags": tags}  # fmt: skip
    if settings.get("identity"):
        identity = [{"resource_id": settings["identity"]}]
        endpoint["identity"] = {"type": "user_assigned", "user_assigned_identities": identity}
    route = {"port": PORT}
    serving = {
        "$schema": DEPLOYMENT_SCHEMA,
        "name": DEPLOYMENT,
        "endpoint_name": deployment.name,
        "model": {"path": str(Path(deployment.model).resolve())},
        "environment": {
            "image": deployment.image,
            "inference_config": {
                "liveness_route": {**route, "path": "/live"},
                "readiness_route": {**route, "path": "/ready"},
                "scoring_route": {**route, "path": "/score"},
            },
        },
        "instance_type": deployment.instance.name,
        "instance_count": deployment.min_instances,
        "tags": tags,
    }
    env = common.server_env(deployment)
    if deployment.sample_rate:
        env |= {
            "SAMPLE_RATE": f"{deployment.sample_rate:g}",
            "SAMPLE_URI": samples_uri(settings, deployment.name),
            "AZURE_CLIENT_ID": client_id,
            **({"SAMPLE_INPUTS": "1"} if deployment.sample_inputs else {}),
        }
    if env:
        serving["environment_variables"] = env
    return endpoint, serving


def _written(deployment: Deployment, cmd: Commands) -> tuple[Path, Path]:
    """The two YAML files, kept in outputs/cloud/endpoints/<name>/: what was sent."""
    from ..jobs.common import as_yaml

    client_id = _client_id(deployment.settings, cmd) if deployment.sample_rate else ""
    folder = RECORDS / deployment.name
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "endpoint.yaml", folder / "deployment.yaml"
    for path, document in zip(paths, documents(deployment, client_id), strict=True):
        path.write_text(as_yaml(document), encoding="utf-8")
        print(f"--- {path.name} ---\n{path.read_text(encoding='utf-8')}")
    return paths


def create(deployment: Deployment, cmd: Commands) -> dict[str, Any]:
    """The endpoint, then its deployment taking all traffic, each waited on by az."""
    settings, name = deployment.settings, deployment.name
    endpoint_file, deployment_file = _written(deployment, cmd)
    made: list[str] = []
    try:
        cmd.run(_az_ml(settings, "online-endpoint", "create", "--file", str(endpoint_file)))
        made.append("endpoint")
        cmd.run(_az_ml(settings, "online-deployment", "create", "--file", str(deployment_file),
                       "--all-traffic"))  # fmt: skip
    except (CloudError, KeyboardInterrupt) as error:
        remove(settings, name, made, cmd)
        if isinstance(error, KeyboardInterrupt):
            raise
        raise CloudError(f"{error}; what it had made is deleted") from error
    return {"deployment": DEPLOYMENT}


def remove(settings: dict[str, Any], name: str, parts: Sequence[str], cmd: Commands) -> None:
    if "endpoint" not in parts:
        return
    argv = _az_ml(settings, "online-endpoint", "delete", "--name", name, "--yes")
    common.delete(argv, r"ResourceNotFound|not found", f"endpoint {name}", cmd)


def describe(settings: dict[str, Any], name: str, cmd: Commands) -> dict[str, Any]:
    shown = cmd.run(_az_ml(settings, "online-endpoint", "show", "--name", name), check=False,
                    quiet=True)  # fmt: skip
    if shown.returncode != 0 or not shown.stdout.strip():
        return {"state": "gone", "instances": 0}
    state = json.loads(shown.stdout).get("provisioning_state", "")
    count = cmd.run(_az_ml(settings, "online-deployment", "show", "--name", DEPLOYMENT,
                           "--endpoint-name", name), check=False, quiet=True)  # fmt: skip
    instances = json.loads(count.stdout).get("instance_count", 0) if count.returncode == 0 else 0
    return {"state": STATES.get(state, state.lower() or "unknown"), "instances": instances}


def labelled(settings: dict[str, Any], cmd: Commands) -> list[common.Found]:
    """The workspace's online endpoints tagged as the project's, however they were made."""
    listed = cmd.run(_az_ml(settings, "online-endpoint", "list"), quiet=True)
    found = []
    for endpoint in json.loads(listed.stdout or "[]"):
        if not common.ours(endpoint.get("tags") or {}, settings):
            continue
        name = endpoint["name"]
        deployments = cmd.run(_az_ml(settings, "online-deployment", "list", "--endpoint-name",
                                     name), check=False, quiet=True)  # fmt: skip
        first = (json.loads(deployments.stdout or "[]") or [{}])[0]
        state = endpoint.get("provisioning_state", "")
        found.append(common.Found(name, first.get("instance_type", "?"),
                                  first.get("instance_count", 0),
                                  STATES.get(state, state.lower() or "unknown")))  # fmt: skip
    return found


def predict(settings: dict[str, Any], name: str, body_file: str, out_file: str,
            cmd: Commands) -> None:  # fmt: skip
    done = cmd.run(_az_ml(settings, "online-endpoint", "invoke", "--name", name,
                          "--request-file", body_file))  # fmt: skip
    Path(out_file).write_text(done.stdout, encoding="utf-8")
