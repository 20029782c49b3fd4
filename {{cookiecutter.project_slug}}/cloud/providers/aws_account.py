"""What AWS runs use of the account, made on first use: the ECR repository of the image, the S3
bucket of the outputs, and the identity (an IAM role, as an instance profile for the VMs) that
may pull, read the run's secrets and write its outputs."""

from __future__ import annotations

import json
import re
from typing import Any

from ..commands import Commands
from ..plan import LABEL_PREFIX

RUNNER_POLICY = {  # what the VM's identity may do: pull the image, read secrets, write outputs
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Action": [
                "ecr:GetAuthorizationToken",
                "ecr:BatchGetImage",
                "ecr:GetDownloadUrlForLayer",
            ],
            "Resource": "*",
        },
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket", "s3:GetObject", "s3:PutObject"],
            "Resource": "*",
        },
        {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": "*"},
        {  # the SSM agent, for `invoke monitor --run ID` (port forwarding; no port opened)
            "Effect": "Allow",
            "Action": [
                "ssm:UpdateInstanceInformation",
                "ssmmessages:CreateControlChannel",
                "ssmmessages:CreateDataChannel",
                "ssmmessages:OpenControlChannel",
                "ssmmessages:OpenDataChannel",
            ],
            "Resource": "*",
        },
    ],
}


def trust(service: str) -> dict[str, Any]:
    """The policy that lets an AWS service (ec2.amazonaws.com, ...) take on a role."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
        ],
    }


EC2_TRUST = trust("ec2.amazonaws.com")


def aws_cli(settings: dict[str, Any], *args: str, output: str = "json") -> list[str]:
    """An `aws` command in the settings' region; `output=""` keeps the command's own output."""
    return ["aws", *args, "--region", settings["region"], *(["--output", output] if output else [])]


def account(settings: dict[str, Any], cmd: Commands) -> str:
    done = cmd.run(
        aws_cli(settings, "sts", "get-caller-identity"), dry_answer='{"Account": "<account>"}'
    )
    return json.loads(done.stdout)["Account"]


def registry(settings: dict[str, Any], cmd: Commands) -> str:
    return f"{account(settings, cmd)}.dkr.ecr.{settings['region']}.amazonaws.com"


def ensure_repository(settings: dict[str, Any], cmd: Commands) -> str:
    """The project's ECR repository (made on first use); returns registry/repository."""
    name = settings["project_name"]
    found = cmd.run(
        aws_cli(settings, "ecr", "describe-repositories", "--repository-names", name), check=False
    )
    if found.returncode != 0 and not cmd.dry_run:
        cmd.run(
            aws_cli(
                settings,
                "ecr",
                "create-repository",
                "--repository-name",
                name,
                "--image-scanning-configuration",
                "scanOnPush=true",
                "--tags",
                f"Key={LABEL_PREFIX}-managed,Value=true",
            )
        )
    return f"{registry(settings, cmd)}/{name}"


def lasting(plan_bucket: str, settings: dict[str, Any]) -> list[str]:
    """What a run makes on first use that stays after it (each run reuses them)."""
    bucket = plan_bucket.removeprefix("s3://").split("/", 1)[0]
    return [
        f"S3 bucket {bucket}: the runs' outputs, billed per GB-month stored",
        f"ECR repository {settings['project_name']}: the images, billed per GB-month stored",
        f"IAM role and instance profile {settings['instance_profile']}: no charge",
    ]


def own_registry(host: str, settings: dict[str, Any]) -> bool:
    """Whether `host` is an ECR registry, the only kind the VM's ECR token may be sent to."""
    return re.fullmatch(r"\d{12}\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com", host) is not None


def docker_login(settings: dict[str, Any], cmd: Commands, docker: str) -> None:
    password = cmd.run(aws_cli(settings, "ecr", "get-login-password", output=""), quiet=True).stdout
    cmd.secrets.append(password.strip())
    cmd.run(
        [docker, "login", "--username", "AWS", "--password-stdin", registry(settings, cmd)],
        input=password,
    )


def ensure_bucket(settings: dict[str, Any], cmd: Commands) -> str:
    """The project's bucket, `s3://...` (made on first use: <project>-<account>-<region>)."""
    bucket = (
        settings["bucket"]
        or f"s3://{settings['project_name']}-{account(settings, cmd)}-{settings['region']}"
    )
    name = bucket.removeprefix("s3://").split("/", 1)[0]
    if cmd.run(aws_cli(settings, "s3api", "head-bucket", "--bucket", name), check=False).returncode:
        create = ["s3api", "create-bucket", "--bucket", name]
        if settings["region"] != "us-east-1":  # us-east-1 takes no location constraint
            create += ["--create-bucket-configuration", f"LocationConstraint={settings['region']}"]
        cmd.run(aws_cli(settings, *create))
    return bucket.rstrip("/")


def ensure_identity(settings: dict[str, Any], cmd: Commands) -> str:
    """The instance profile the VMs run as (made on first use, with RUNNER_POLICY)."""
    name = settings["instance_profile"]
    found = cmd.run(
        aws_cli(settings, "iam", "get-instance-profile", "--instance-profile-name", name),
        check=False,
    )
    if found.returncode == 0 or cmd.dry_run:
        return name
    cmd.run(
        aws_cli(
            settings,
            "iam",
            "create-role",
            "--role-name",
            name,
            "--assume-role-policy-document",
            json.dumps(EC2_TRUST),
        )
    )
    cmd.run(
        aws_cli(
            settings,
            "iam",
            "put-role-policy",
            "--role-name",
            name,
            "--policy-name",
            name,
            "--policy-document",
            json.dumps(RUNNER_POLICY),
        )
    )
    cmd.run(aws_cli(settings, "iam", "create-instance-profile", "--instance-profile-name", name))
    cmd.run(
        aws_cli(
            settings,
            "iam",
            "add-role-to-instance-profile",
            "--instance-profile-name",
            name,
            "--role-name",
            name,
        )
    )
    return name
