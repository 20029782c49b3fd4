"""A SageMaker real-time endpoint (invoke deploy --cloud=aws): the model's folder packed as
model.tar.gz in the bucket, then a model, an endpoint config and an endpoint, all named after
the endpoint and labelled as the project's, through `aws sagemaker`. SageMaker unpacks the
archive into /opt/ml/model and starts the serving image as `docker run IMAGE serve`.

With --max above --min, Application Auto Scaling keeps invocations per instance near
TARGET_INVOCATIONS. --sample-rate turns on SageMaker's Data Capture, which writes that share of
the answers (and with --sample-inputs the requests) to the bucket as JSON lines. A create that
fails, or is interrupted, deletes what it made: nothing is left billed. The container contract:
serving/__init__.py's sources.
"""

from __future__ import annotations

import json
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..commands import CloudError, Commands
from ..plan import PlanError
from ..providers import aws_account, aws_policies, sagemaker_instances
from . import common
from .common import Deployment

SERVICE = "SageMaker real-time endpoint"
BUCKET = True  # the model archive goes there
VARIANT = "AllTraffic"
PARTS = ("scaling", "endpoint", "config", "model", "archive")  # what deploy makes, newest first
GONE = r"Could not find|not found|ObjectNotFound|No scalable target"  # AWS's "no such thing"
TARGET_INVOCATIONS = 600.0  # per instance per minute: scale out above it, in below it
STATES = {"InService": "serving", "Creating": "creating", "Updating": "updating",
          "Failed": "failed", "Deleting": "deleting", "OutOfService": "out of service"}  # fmt: skip


def check(deployment: Deployment) -> None:
    percent = deployment.sample_rate * 100
    if abs(percent - round(percent)) > 1e-9:
        raise PlanError(f"--sample-rate {deployment.sample_rate:g}: SageMaker's Data Capture keeps "
                        "whole percents, 0.01 to 1")  # fmt: skip
    if deployment.instance.name not in sagemaker_instances.names("ProductionVariantInstanceType"):
        raise PlanError(f"--instance {deployment.instance.name}: SageMaker hosts on no such "
                        "instance")  # fmt: skip


def archive_uri(settings: dict[str, Any], name: str) -> str:
    return f"{common.endpoints_prefix(settings)}{name}/model.tar.gz"


# Where Data Capture writes: SageMaker's own sampling of an endpoint's answers (and inputs), as
# JSON lines; the server's own sampler stays off.
samples_uri = common.samples_uri


def _capture(deployment: Deployment) -> list[str]:
    """--data-capture-config for --sample-rate (none without one)."""
    if not deployment.sample_rate:
        return []
    modes = ["Output", *(["Input"] if deployment.sample_inputs else [])]
    capture = {
        "EnableCapture": True,
        "InitialSamplingPercentage": round(deployment.sample_rate * 100),
        "DestinationS3Uri": samples_uri(deployment.settings, deployment.name),
        "CaptureOptions": [{"CaptureMode": mode} for mode in modes],
        "CaptureContentTypeHeader": {"JsonContentTypes": ["application/json"]},
    }
    return ["--data-capture-config", json.dumps(capture)]


def _scaling_target(name: str) -> list[str]:
    return ["--service-namespace", "sagemaker", "--resource-id",
            f"endpoint/{name}/variant/{VARIANT}",
            "--scalable-dimension", "sagemaker:variant:DesiredInstanceCount"]  # fmt: skip


def role_arn(settings: dict[str, Any], models: str, cmd: Commands) -> str:
    """cloud.toml's `sagemaker_endpoint_role` as it is, else <project>-endpoint, made on first
    use: pulls the image, reads the model archives under `models` and writes the captured
    samples there, nothing else."""
    if settings.get("sagemaker_endpoint_role"):
        return str(settings["sagemaker_endpoint_role"])
    return aws_account.ensure_role(
        settings,
        f"{settings['project_name']}-endpoint",
        aws_policies.trust("sagemaker.amazonaws.com"),
        aws_policies.sagemaker_endpoint(settings, aws_account.account(settings, cmd), models),
        cmd,
    )


def create(deployment: Deployment, cmd: Commands) -> dict[str, Any]:
    """Model, endpoint config and endpoint (and its scaling) for the archive at archive_uri,
    waited on until in service."""
    settings, name = deployment.settings, deployment.name
    model_uri = archive_uri(settings, name)
    tags = [{"Key": key, "Value": value} for key, value in deployment.labels.items()]
    role = role_arn(settings, common.endpoints_prefix(settings), cmd)
    made: list[str] = []
    try:
        container = {"Image": deployment.image, "ModelDataUrl": model_uri,
                     "Environment": common.server_env(deployment)}  # fmt: skip
        cmd.run(aws_account.aws_cli(
            settings, "sagemaker", "create-model", "--model-name", name, "--execution-role-arn",
            role, "--primary-container", json.dumps(container), "--tags", json.dumps(tags),
        ))  # fmt: skip
        made.append("model")
        variant = {"VariantName": VARIANT, "ModelName": name,
                   "InstanceType": deployment.instance.name,
                   "InitialInstanceCount": deployment.min_instances}  # fmt: skip
        cmd.run(aws_account.aws_cli(
            settings, "sagemaker", "create-endpoint-config", "--endpoint-config-name", name,
            "--production-variants", json.dumps([variant]), *_capture(deployment),
            "--tags", json.dumps(tags),
        ))  # fmt: skip
        made.append("config")
        done = cmd.run(aws_account.aws_cli(
            settings, "sagemaker", "create-endpoint", "--endpoint-name", name,
            "--endpoint-config-name", name, "--tags", json.dumps(tags),
        ), dry_answer='{"EndpointArn": "arn:aws:sagemaker:dry-run"}')  # fmt: skip
        made.append("endpoint")
        cmd.run(aws_account.aws_cli(settings, "sagemaker", "wait", "endpoint-in-service",
                                    "--endpoint-name", name, output=""))  # fmt: skip
        if deployment.max_instances > deployment.min_instances:
            _autoscale(deployment, cmd)
            made.append("scaling")
    except (CloudError, KeyboardInterrupt) as error:
        reason = _failure(settings, name, cmd) if "endpoint" in made else ""
        remove(settings, name, made, cmd)
        if isinstance(error, KeyboardInterrupt):
            raise
        raise CloudError(f"{error}{reason}; what it had made is deleted") from error
    return {"endpoint_arn": json.loads(done.stdout)["EndpointArn"], "model_uri": model_uri}


def _autoscale(deployment: Deployment, cmd: Commands) -> None:
    settings, target = deployment.settings, _scaling_target(deployment.name)
    cmd.run(aws_account.aws_cli(
        settings, "application-autoscaling", "register-scalable-target", *target,
        "--min-capacity", str(deployment.min_instances),
        "--max-capacity", str(deployment.max_instances),
    ))  # fmt: skip
    policy = {
        "TargetValue": TARGET_INVOCATIONS,
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
        },
        "ScaleInCooldown": 300,
        "ScaleOutCooldown": 60,
    }
    cmd.run(aws_account.aws_cli(
        settings, "application-autoscaling", "put-scaling-policy", *target,
        "--policy-name", f"{deployment.name}-invocations", "--policy-type", "TargetTrackingScaling",
        "--target-tracking-scaling-policy-configuration", json.dumps(policy),
    ))  # fmt: skip


def _endpoint(settings: dict[str, Any], name: str, cmd: Commands) -> dict[str, Any] | None:
    """SageMaker's description of endpoint `name`; None where it has none (or in a dry run)."""
    asked = aws_account.aws_cli(settings, "sagemaker", "describe-endpoint", "--endpoint-name", name)
    done = cmd.run(asked, check=False, quiet=True)
    return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None


def _failure(settings: dict[str, Any], name: str, cmd: Commands) -> str:
    """SageMaker's reason for a failed endpoint, as a clause; empty where it gives none."""
    reason = (_endpoint(settings, name, cmd) or {}).get("FailureReason", "")
    return f" (SageMaker: {reason})" if reason else ""


def _pack(model: Path, into: Path) -> Path:
    """model.tar.gz of the folder's files at its top (SageMaker unpacks it into /opt/ml/model),
    owned by root and readable by anyone: the serving image runs as uid 1000."""

    def readable(member: tarfile.TarInfo) -> tarfile.TarInfo:
        member.uid = member.gid = 0
        member.uname = member.gname = ""
        member.mode = 0o755 if member.isdir() else 0o644
        return member

    archive = into / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(model.iterdir()):
            tar.add(path, arcname=path.name, filter=readable)
    return archive


def upload(settings: dict[str, Any], name: str, folder: str, cmd: Commands) -> None:
    """The model folder, packed as SageMaker unpacks it, to archive_uri."""
    with tempfile.TemporaryDirectory() as scratch:
        packed = str(_pack(Path(folder), Path(scratch))) if not cmd.dry_run else "model.tar.gz"
        cmd.run(aws_account.aws_cli(settings, "s3", "cp", packed, archive_uri(settings, name),
                                    "--only-show-errors", output=""))  # fmt: skip


def remove(settings: dict[str, Any], name: str, parts: Sequence[str], cmd: Commands) -> None:
    """Delete `parts` (of PARTS) of endpoint `name`, newest first; one already gone is no
    error."""
    steps = {
        "scaling": ["application-autoscaling", "deregister-scalable-target",
                    *_scaling_target(name)],
        "endpoint": ["sagemaker", "delete-endpoint", "--endpoint-name", name],
        "config": ["sagemaker", "delete-endpoint-config", "--endpoint-config-name", name],
        "model": ["sagemaker", "delete-model", "--model-name", name],
        "archive": ["s3", "rm", archive_uri(settings, name), "--only-show-errors"],
    }  # fmt: skip
    for part in PARTS:
        if part in parts:
            argv = aws_account.aws_cli(settings, *steps[part], output="")
            common.delete(argv, GONE, f"the {part} of {name}", cmd)


def describe(settings: dict[str, Any], name: str, cmd: Commands) -> dict[str, Any]:
    """The endpoint's state and instance count; state 'gone' where SageMaker has no such one."""
    endpoint = _endpoint(settings, name, cmd)
    if endpoint is None:
        return {"state": "gone", "instances": 0}
    variants = endpoint.get("ProductionVariants") or [{}]
    status = endpoint["EndpointStatus"]
    return {"state": STATES.get(status, status.lower()),
            "instances": variants[0].get("CurrentInstanceCount", 0)}  # fmt: skip


def labelled(settings: dict[str, Any], cmd: Commands) -> list[common.Found]:
    """The region's endpoints tagged as the project's, however they were made."""
    listed = cmd.run(aws_account.aws_cli(settings, "sagemaker", "list-endpoints"), quiet=True)
    found = []
    for item in json.loads(listed.stdout or "{}").get("Endpoints", []):
        asked = ["sagemaker", "list-tags", "--resource-arn", item["EndpointArn"]]
        tags = json.loads(cmd.run(aws_account.aws_cli(settings, *asked), quiet=True).stdout)
        if not common.ours({t["Key"]: t["Value"] for t in tags.get("Tags", [])}, settings):
            continue
        name = item["EndpointName"]
        state = describe(settings, name, cmd)
        config = cmd.run(aws_account.aws_cli(settings, "sagemaker", "describe-endpoint-config",
                                             "--endpoint-config-name", name), check=False,
                         quiet=True)  # fmt: skip
        variants = json.loads(config.stdout or "{}").get("ProductionVariants") or [{}]
        found.append(common.Found(name, variants[0].get("InstanceType", "?"),
                                  state["instances"], state["state"]))  # fmt: skip
    return found


def predict(settings: dict[str, Any], name: str, body_file: str, out_file: str,
            cmd: Commands) -> None:  # fmt: skip
    """POST the file's JSON to the endpoint (its /invocations); the answer lands in out_file."""
    cmd.run(aws_account.aws_cli(
        settings, "sagemaker-runtime", "invoke-endpoint", "--endpoint-name", name,
        "--content-type", "application/json", "--accept", "application/json",
        "--body", f"fileb://{body_file}", out_file,
    ))  # fmt: skip
