"""The IAM documents of AWS runs: what the VM's role and the SageMaker job's role may do, and who
may take each role on.

Each reaches this project and nothing else in the account: its ECR repository (pull), its bucket
or bucket prefix (read and write), the buckets cloud.toml's `data_buckets` names (read), and the
secrets under [secrets] (read). They are written again at every launch, so they follow cloud.toml.
cloudgpu/tests/test_iam_policies.py runs parliament and cloudsplaining on them.
"""

from __future__ import annotations

from typing import Any

from ..plan import LABEL_PREFIX

VERSION = "2012-10-17"
SAGEMAKER_LOGS = "/aws/sagemaker/TrainingJobs"  # the log group SageMaker writes a job's logs to


def trust(service: str, account: str = "") -> dict[str, Any]:
    """The policy that lets an AWS service (ec2.amazonaws.com, ...) take on a role; with
    `account`, only on that account's behalf (no other account's schedule may use it)."""
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"Service": service},
        "Action": "sts:AssumeRole",
    }
    if account:
        statement["Condition"] = {"StringEquals": {"aws:SourceAccount": account}}
    return {"Version": VERSION, "Statement": [statement]}


def deadline(settings: dict[str, Any], account: str, project_label: str) -> dict[str, Any]:
    """What EventBridge Scheduler may do at a VM's deadline: terminate the project's instances,
    those that carry its labels, and nothing else."""
    return {
        "Version": VERSION,
        "Statement": [
            {
                "Sid": "TerminateTheProjectVMs",
                "Effect": "Allow",
                "Action": "ec2:TerminateInstances",
                "Resource": f"arn:aws:ec2:{settings['region']}:{account}:instance/*",
                "Condition": {
                    "StringEquals": {
                        f"aws:ResourceTag/{LABEL_PREFIX}-managed": "true",
                        f"aws:ResourceTag/{LABEL_PREFIX}-project": project_label,
                    }
                },
            }
        ],
    }


def split_bucket(bucket: str) -> tuple[str, str]:
    """(name, prefix) of s3://name[/prefix]; the prefix ends in / unless it is empty."""
    name, _, prefix = bucket.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    return name, f"{prefix}/" if prefix else ""


def _read(bucket: str, sid: str, actions: list[str]) -> list[dict[str, Any]]:
    """List the objects under a bucket's prefix and act on them (only under that prefix)."""
    name, prefix = split_bucket(bucket)
    listing: dict[str, Any] = {
        "Sid": f"List{sid}",
        "Effect": "Allow",
        "Action": "s3:ListBucket",
        "Resource": f"arn:aws:s3:::{name}",
    }
    if prefix:
        listing["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}*"]}}
    objects = {
        "Sid": sid,
        "Effect": "Allow",
        "Action": actions,
        "Resource": f"arn:aws:s3:::{name}/{prefix}*",
    }
    return [listing, objects]


def _pull(region: str, account: str, project: str) -> list[dict[str, Any]]:
    """Pull the project's image from its ECR repository, and no other."""
    return [
        {  # takes no resource (AWS's Service Authorization Reference); the token it returns
            # pulls only what the statement below allows
            "Sid": "RegistryToken",
            "Effect": "Allow",
            "Action": "ecr:GetAuthorizationToken",
            "Resource": "*",
        },
        {
            "Sid": "PullTheProjectImage",
            "Effect": "Allow",
            "Action": [
                "ecr:BatchCheckLayerAvailability",
                "ecr:BatchGetImage",
                "ecr:GetDownloadUrlForLayer",
            ],
            "Resource": f"arn:aws:ecr:{region}:{account}:repository/{project}",
        },
    ]


def _secret_arn(region: str, account: str, name: str) -> str:
    # Secrets Manager ends each secret's ARN with a dash and six random characters.
    if name.startswith("arn:"):
        return name
    return f"arn:aws:secretsmanager:{region}:{account}:secret:{name}-??????"


def endpoints_arn(settings: dict[str, Any]) -> str:
    """The objects of the project's endpoints (deploy/common.py's endpoints_prefix)."""
    name, prefix = split_bucket(settings["bucket"])
    return f"arn:aws:s3:::{name}/{prefix}{settings['project_name']}/endpoints/*"


def runner(settings: dict[str, Any], account: str, session_manager: bool = True) -> dict[str, Any]:
    """What the code of a run may do with the account (on a VM, or in a SageMaker job): never
    write the deployed models (an endpoint reads its archive again for each new instance)."""
    region, project = settings["region"], settings["project_name"]
    statements: list[dict[str, Any]] = [
        *_pull(region, account, project),
        *_read(settings["bucket"], "ReadWriteTheProjectBucket", ["s3:GetObject", "s3:PutObject"]),
        {
            "Sid": "NeverWriteTheEndpoints",
            "Effect": "Deny",
            "Action": ["s3:PutObject", "s3:DeleteObject"],
            "Resource": endpoints_arn(settings),
        },
    ]
    for number, bucket in enumerate(settings.get("data_buckets", []), 1):
        statements += _read(bucket, f"ReadData{number}", ["s3:GetObject"])
    secrets = sorted(set(settings["secrets"].values()))
    if secrets:
        statements.append(
            {
                "Sid": "ReadTheNamedSecrets",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": [_secret_arn(region, account, name) for name in secrets],
            }
        )
    if session_manager:  # the SSM agent, for `invoke monitor --run ID` (no port is opened)
        statements += [
            {
                "Sid": "SessionManagerAgent",
                "Effect": "Allow",
                "Action": "ssm:UpdateInstanceInformation",
                "Resource": f"arn:aws:ec2:{region}:{account}:instance/*",
            },
            {  # ssmmessages takes no resource
                "Sid": "SessionManagerChannels",
                "Effect": "Allow",
                "Action": [
                    "ssmmessages:CreateControlChannel",
                    "ssmmessages:CreateDataChannel",
                    "ssmmessages:OpenControlChannel",
                    "ssmmessages:OpenDataChannel",
                ],
                "Resource": "*",
            },
        ]
    return {"Version": VERSION, "Statement": statements}


def sagemaker_job(settings: dict[str, Any], account: str) -> dict[str, Any]:
    """The runner's rights, the job's own log group, and its metrics in SageMaker's namespace."""
    region = settings["region"]
    policy = runner(settings, account, session_manager=False)
    policy["Statement"] += [
        {
            "Sid": "WriteTheJobLogs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": f"arn:aws:logs:{region}:{account}:log-group:{SAGEMAKER_LOGS}:*",
        },
        {  # takes no resource; the condition keeps it to SageMaker's namespace
            "Sid": "PutTheJobMetrics",
            "Effect": "Allow",
            "Action": "cloudwatch:PutMetricData",
            "Resource": "*",
            "Condition": {"StringEquals": {"cloudwatch:namespace": SAGEMAKER_LOGS}},
        },
    ]
    return policy


def sagemaker_endpoint(settings: dict[str, Any], account: str, models: str) -> dict[str, Any]:
    """The role of the project's SageMaker endpoints: pull its image, read the model archives
    under `models` (s3://bucket/<project>/endpoints/: every endpoint reads its own again when
    it adds an instance), write Data Capture's samples and the endpoints' logs; nothing of the
    runs, data or secrets."""
    region = settings["region"]
    name, prefix = split_bucket(models)
    return {
        "Version": VERSION,
        "Statement": [
            *_pull(region, account, settings["project_name"]),
            {
                "Sid": "ReadTheModelArchives",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{name}/{prefix}*",
            },
            {
                "Sid": "WriteTheCapturedSamples",
                "Effect": "Allow",
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{name}/{prefix}*/samples/*",
            },
            {
                "Sid": "WriteTheEndpointLogs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": f"arn:aws:logs:{region}:{account}:log-group:/aws/sagemaker/Endpoints/*",
            },
        ],
    }
