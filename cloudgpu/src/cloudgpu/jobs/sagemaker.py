"""SageMaker training jobs (invoke train --cloud=aws --backend=managed): one CreateTrainingJob
request, sent with `aws sagemaker create-training-job --cli-input-json`.

Each node runs the image's launcher, which reads /opt/ml/input/config/resourceconfig.json. The
run folder is /opt/ml/checkpoints/run: SageMaker copies that folder to the bucket as it changes
and back at every start, so a spot job that is interrupted resumes from its last checkpoint and
its metrics, log and checkpoints land in <bucket>/outputs/run, as a VM run's do.
Facts: SageMaker's instance lists (sagemaker_instances.json, from botocore's model) and the
SageMaker developer guide.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..commands import CloudError, Commands
from ..plan import Plan, PlanError
from ..providers import aws_account, aws_policies, sagemaker_instances

if TYPE_CHECKING:
    from .common import Distribution

CHECKPOINTS = "/opt/ml/checkpoints"  # SageMaker's default CheckpointConfig.LocalPath
VOLUME_GB = 100
MAX_RUNTIME_S = 28 * 24 * 3600  # SageMaker's own limit
SPOT_WAIT = 2  # a spot job may wait for capacity as long again as it may run: waiting is free
STATES = {  # TrainingJobStatus -> how a VM run's status.json says it
    "InProgress": "running",
    "Completed": "finished",
    "Failed": "failed",
    "Stopping": "stopping",
    "Stopped": "stopped",
}
SPEC = "sagemaker-request.json"
FORMAT = "json"  # what --cli-input-json reads


def run_dir(bucket: str) -> str:
    del bucket  # SageMaker moves the folder to CheckpointConfig.S3Uri itself
    return f"{CHECKPOINTS}/run"


def instance_type(plan: Plan) -> str:
    assert plan.offer is not None
    return f"ml.{plan.offer.machine}"


def check(plan: Plan) -> None:
    """PlanError unless SageMaker trains on the plan's instance type and limits."""
    known = sagemaker_instances.names("TrainingInstanceType")
    wanted = instance_type(plan)
    if wanted not in known:
        assert plan.offer is not None
        same_gpu = sorted(
            t for t in known if t.startswith(f"ml.{plan.offer.machine.split('.')[0]}.")
        )
        asked = (
            f"--machine {plan.offer.machine}"
            if plan.offer.is_cpu
            else f"--gpu {plan.offer.gpu}:{plan.offer.count}"
        )
        raise PlanError(
            f"{asked}: SageMaker has no training instance {wanted}; it has "
            f"{', '.join(same_gpu) or 'none of that family'}"
        )
    if plan.max_hours * 3600 > MAX_RUNTIME_S:
        raise PlanError(f"--max-hours {plan.max_hours:g}: SageMaker runs a job 28 days at most")


def role_arn(settings: dict[str, Any], cmd: Commands) -> str:
    """The role SageMaker runs the job as: cloud.toml's `sagemaker_role` as it is, else
    <project>-sagemaker, made on first use, its policy written again at every launch."""
    if settings.get("sagemaker_role"):
        return str(settings["sagemaker_role"])
    return aws_account.ensure_role(
        settings,
        f"{settings['project_name']}-sagemaker",
        aws_policies.trust("sagemaker.amazonaws.com"),
        aws_policies.sagemaker_job(settings, aws_account.account(settings, cmd)),
        cmd,
    )


def spec(
    plan: Plan, environment: dict[str, str], distribution: Distribution, cmd: Commands
) -> dict[str, Any]:
    """The CreateTrainingJob request of the plan (the role made on first use)."""
    del distribution  # one container per node; the launcher starts the rest
    runtime = int(plan.max_hours * 3600)
    stopping = {"MaxRuntimeInSeconds": runtime}
    if plan.spot:
        stopping["MaxWaitTimeInSeconds"] = min(runtime * SPOT_WAIT, MAX_RUNTIME_S)
    entrypoint, arguments = plan.entrypoint
    return {
        "TrainingJobName": plan.job,
        "RoleArn": role_arn(plan.settings, cmd),
        "AlgorithmSpecification": {
            "TrainingImage": plan.image,
            "TrainingInputMode": "File",
            "ContainerEntrypoint": entrypoint,
            "ContainerArguments": arguments,
        },
        "ResourceConfig": {
            "InstanceType": instance_type(plan),
            "InstanceCount": plan.nodes,
            "VolumeSizeInGB": VOLUME_GB,
        },
        "OutputDataConfig": {"S3OutputPath": f"{plan.bucket}/outputs/model"},
        "StoppingCondition": stopping,
        "EnableManagedSpotTraining": plan.spot,
        "CheckpointConfig": {"S3Uri": f"{plan.bucket}/outputs", "LocalPath": CHECKPOINTS},
        "Environment": environment,
        "Tags": [{"Key": key, "Value": value} for key, value in plan.labels.items()],
    }


def submit(plan: Plan, path: str, cmd: Commands) -> dict[str, Any]:
    done = cmd.run(
        aws_account.aws_cli(plan.settings, "sagemaker", "create-training-job", "--cli-input-json",
                 f"file://{path}"),
        dry_answer='{"TrainingJobArn": "arn:aws:sagemaker:dry-run"}',
    )  # fmt: skip
    return {"job": plan.job, "job_arn": json.loads(done.stdout)["TrainingJobArn"]}


def describe(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> dict[str, Any]:
    """The job's state, in a VM run's words, with what SageMaker bills so far."""
    done = cmd.run(
        aws_account.aws_cli(settings, "sagemaker", "describe-training-job", "--training-job-name",
                 record["job"]),
        quiet=True,
    )  # fmt: skip
    job = json.loads(done.stdout)
    state = STATES.get(job["TrainingJobStatus"], job["TrainingJobStatus"].lower())
    if state == "stopped" and job.get("SecondaryStatus") == "MaxWaitTimeExceeded":
        state = "timeout"
    return {
        "state": state,
        "detail": job.get("SecondaryStatus", ""),
        "nodes": job.get("ResourceConfig", {}).get("InstanceCount"),
        "billable_s": job.get("BillableTimeInSeconds"),
        "failure": job.get("FailureReason", ""),
    }


def cancel(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> None:
    if not record.get("job"):
        raise CloudError(f"run {record.get('run')} has no SageMaker job name")
    cmd.run(
        aws_account.aws_cli(settings, "sagemaker", "stop-training-job", "--training-job-name",
                 record["job"], output=""),
    )  # fmt: skip
