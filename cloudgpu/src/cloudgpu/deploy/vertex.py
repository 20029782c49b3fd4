"""A Vertex AI endpoint (invoke deploy --cloud=gcp): the model folder copied to the bucket, a
model uploaded with the serving image (Vertex AI hands the server that copy as AIP_STORAGE_URI,
which it reads itself), an endpoint, and the model deployed to it on dedicated machines, all
through `gcloud ai`, which waits for each operation. Labelled as the project's.

Vertex AI scales between --min and --max replicas on CPU (or GPU) use by itself. With
--sample-rate the server samples its predictions to the bucket itself (serving/samples.py), as
the project's endpoint account (gcp_identity.ensure_endpoint), which may add files under
endpoints/ and nothing else (the training runs' account may not write there). A
create that fails, or is interrupted, deletes what it made. Its prediction prices were not
found: the catalog gives Compute Engine's price for the same machine, a lower bound
(endpoints.json).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from typing import Any

from ..commands import CloudError, Commands
from ..providers import gcp, gcp_identity
from . import common
from .common import Deployment

SERVICE = "Vertex AI endpoint"
BUCKET = True  # the model folder's copy goes there
PARTS = ("deployment", "endpoint", "model", "archive")  # what deploy makes, newest first
HEALTH, PREDICT = "/ping", "/invocations"  # the server answers both on every contract


def _gcloud(settings: dict[str, Any], *args: str) -> list[str]:
    return ["gcloud", "ai", *args, f"--region={settings['region']}",
            f"--project={settings['project']}", "--format=json"]  # fmt: skip


def check(deployment: Deployment) -> None:
    gcp.need_project(deployment.settings)


def archive_uri(settings: dict[str, Any], name: str) -> str:
    """The model folder's copy in the bucket: <bucket>/<project>/endpoints/<name>/model."""
    return f"{common.endpoints_prefix(settings)}{name}/model"


samples_uri = common.samples_uri  # where the server writes its samples


def _sampling(deployment: Deployment, cmd: Commands) -> tuple[list[str], list[str]]:
    """The server's variables (on the model): the pinned digest, and for --sample-rate where its
    samples go, and the account it then runs as (on its deployment)."""
    env, runs_as = common.server_env(deployment), []
    if deployment.sample_rate:
        settings = deployment.settings
        env |= {"SAMPLE_RATE": f"{deployment.sample_rate:g}",
                "SAMPLE_URI": samples_uri(settings, deployment.name),
                **({"SAMPLE_INPUTS": "1"} if deployment.sample_inputs else {})}  # fmt: skip
        account = gcp_identity.ensure_endpoint(settings, settings["bucket"], cmd)
        runs_as = [f"--service-account={account}"]
    flags = ",".join(f"{key}={value}" for key, value in env.items())
    return ([f"--container-env-vars={flags}"] if env else []), runs_as


def upload(settings: dict[str, Any], name: str, folder: str, cmd: Commands) -> None:
    """The model folder itself (not an archive): Vertex AI copies the folder for the server."""
    gcp.copy_up(folder, archive_uri(settings, name), settings, cmd)


def _labels(deployment: Deployment) -> str:
    return ",".join(f"{key}={value}" for key, value in deployment.labels.items())


def create(deployment: Deployment, cmd: Commands) -> dict[str, Any]:
    """The model, the endpoint and the model deployed on it, each waited on by gcloud."""
    settings, name = deployment.settings, deployment.name
    model_env, runs_as = _sampling(deployment, cmd)
    made: list[str] = []
    try:
        cmd.run(_gcloud(
            settings, "models", "upload", f"--model-id={name}", f"--display-name={name}",
            f"--container-image-uri={deployment.image}", "--container-ports=8080",
            f"--container-health-route={HEALTH}", f"--container-predict-route={PREDICT}",
            f"--artifact-uri={archive_uri(settings, name)}", f"--labels={_labels(deployment)}",
            *model_env,
        ))  # fmt: skip
        made.append("model")
        cmd.run(_gcloud(settings, "endpoints", "create", f"--endpoint-id={name}",
                        f"--display-name={name}", f"--labels={_labels(deployment)}"))  # fmt: skip
        made.append("endpoint")
        machine, accelerator = deployment.instance.machine, deployment.instance.accelerator
        # Counted from the call: Vertex AI goes on deploying (and billing) after a failed or
        # interrupted deploy-model, so cleanup undeploys whatever the endpoint serves.
        made.append("deployment")
        cmd.run(_gcloud(
            settings, "endpoints", "deploy-model", name, f"--model={name}",
            f"--display-name={name}", f"--machine-type={machine}",
            f"--min-replica-count={deployment.min_instances}",
            f"--max-replica-count={deployment.max_instances}", "--traffic-split=0=100",
            *([f"--accelerator=type={accelerator},count=1"] if accelerator else []), *runs_as,
        ))  # fmt: skip
    except (CloudError, KeyboardInterrupt) as error:
        try:
            remove(settings, name, made, cmd)
        except CloudError as left:
            raise CloudError(f"{str(error) or 'interrupted'}; {left}") from error
        if isinstance(error, KeyboardInterrupt):
            raise
        raise CloudError(f"{error}; what it had made is deleted") from error
    project, region = settings["project"], settings["region"]
    return {"endpoint_id": f"projects/{project}/locations/{region}/endpoints/{name}"}


def _endpoint(settings: dict[str, Any], name: str, cmd: Commands) -> dict[str, Any] | None:
    done = cmd.run(_gcloud(settings, "endpoints", "describe", name), check=False, quiet=True)
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def remove(settings: dict[str, Any], name: str, parts: Sequence[str], cmd: Commands) -> None:
    """Delete `parts` (of PARTS) of endpoint `name`, newest first: the deployed models first,
    since Vertex AI deletes neither an endpoint nor a model while it serves. One already gone
    is no error; every part is tried, and a CloudError at the end names the exact commands of
    those left (an undeploy that fails leaves a model billed)."""
    left: list[str] = []
    if "deployment" in parts:
        endpoint = _endpoint(settings, name, cmd) or {}
        for deployed in endpoint.get("deployedModels", []):
            undeploy = _gcloud(settings, "endpoints", "undeploy-model", name,
                               f"--deployed-model-id={deployed['id']}")  # fmt: skip
            if cmd.run(undeploy, check=False).returncode != 0:
                left.append(shlex.join(undeploy))
    steps = {
        "endpoint": _gcloud(settings, "endpoints", "delete", name, "--quiet"),
        "model": _gcloud(settings, "models", "delete", name, "--quiet"),
        "archive": ["gcloud", "storage", "rm", "--recursive", archive_uri(settings, name)],
    }
    for part in PARTS[1:]:
        if part in parts:
            try:
                common.delete(steps[part], r"NOT_FOUND|not found", f"the {part} of {name}", cmd)
            except CloudError:
                left.append(shlex.join(steps[part]))
    if left:
        commands = "; ".join(left)
        raise CloudError(f"{name} is not all deleted (billed while it serves): run {commands}")


def describe(settings: dict[str, Any], name: str, cmd: Commands) -> dict[str, Any]:
    """'serving' with the replicas asked for while a model is deployed; 'gone' where the
    endpoint is not there. Vertex AI reports no live replica count: --min is shown."""
    endpoint = _endpoint(settings, name, cmd)
    if endpoint is None:
        return {"state": "gone", "instances": 0}
    deployed = endpoint.get("deployedModels") or []
    if not deployed:
        return {"state": "no model deployed", "instances": 0}
    replicas = deployed[0].get("dedicatedResources", {}).get("minReplicaCount", 1)
    return {"state": "serving", "instances": replicas}


def labelled(settings: dict[str, Any], cmd: Commands) -> list[common.Found]:
    """The region's endpoints labelled as the project's, however they were made."""
    gcp.need_project(settings)
    listed = cmd.run(_gcloud(settings, "endpoints", "list"), quiet=True)
    found = []
    for endpoint in json.loads(listed.stdout or "[]"):
        if not common.ours(endpoint.get("labels") or {}, settings):
            continue
        deployed = endpoint.get("deployedModels") or []
        resources = deployed[0].get("dedicatedResources", {}) if deployed else {}
        spec = resources.get("machineSpec", {})
        instance = common.catalog_name("gcp", spec.get("machineType", "?"),
                                       spec.get("acceleratorType", ""))  # fmt: skip
        state = "serving" if deployed else "no model deployed"
        found.append(common.Found(endpoint["name"].rsplit("/", 1)[-1], instance,
                                  resources.get("minReplicaCount", 0), state))  # fmt: skip
    return found


def predict(settings: dict[str, Any], name: str, body_file: str, out_file: str,
            cmd: Commands) -> None:  # fmt: skip
    done = cmd.run(_gcloud(settings, "endpoints", "predict", name, f"--json-request={body_file}"))
    with open(out_file, "w", encoding="utf-8") as answer:
        answer.write(done.stdout)
