"""What AWS runs use of the account, made on first use: the ECR repository of the image, the S3
bucket of the outputs, and the identity (an IAM role, as an instance profile for the VMs) that
may pull the image, read the run's secrets and write its outputs (aws_policies.py says what)."""

from __future__ import annotations

import json
import re
from typing import Any

from ..commands import Commands
from ..plan import LABEL_PREFIX
from . import aws_policies

MANAGED_TAG = f"Key={LABEL_PREFIX}-managed,Value=true"  # on what the project makes


def aws_cli(settings: dict[str, Any], *args: str, output: str = "json") -> list[str]:
    """An `aws` command in the settings' region; `output=""` keeps the command's own output."""
    return ["aws", *args, "--region", settings["region"], *(["--output", output] if output else [])]


def account(settings: dict[str, Any], cmd: Commands) -> str:
    """The account's id, asked once per command: the bucket, the roles and the deadline schedule
    all name it, and the settings keep it."""
    if "_account" not in settings:
        done = cmd.run(
            aws_cli(settings, "sts", "get-caller-identity"), dry_answer='{"Account": "<account>"}'
        )
        settings["_account"] = json.loads(done.stdout)["Account"]
    return str(settings["_account"])


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
                MANAGED_TAG,
            )
        )
    return f"{registry(settings, cmd)}/{name}"


def lasting(plan_bucket: str, settings: dict[str, Any], backend: str = "vm") -> list[str]:
    """What a run makes on first use that stays after it (each run reuses them)."""
    bucket = plan_bucket.removeprefix("s3://").split("/", 1)[0]
    project = settings["project_name"]
    made = [
        f"S3 bucket {bucket}: the runs' outputs, billed per GB-month stored",
        f"ECR repository {project}: the images, billed per GB-month stored",
    ]
    if backend == "managed" and not settings.get("sagemaker_role"):
        made.append(f"IAM role {project}-sagemaker, which the jobs run as: no charge")
    if backend == "vm":
        made += [
            f"IAM role and instance profile {settings['instance_profile']}: no charge",
            f"IAM role {project}-deadline, which each VM's deadline schedule runs as (the "
            "schedule is deleted once it fires): no charge",
            f"security group {project}-runs, no inbound rule: no charge",
        ]
    return made


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
    """The project's bucket, `s3://...` (made on first use: <project>-<account>-<region>, owned by
    this account, closed to the public, encrypted at rest). A dry run shows every step."""
    owner = account(settings, cmd)
    bucket = settings["bucket"] or f"s3://{settings['project_name']}-{owner}-{settings['region']}"
    name = bucket.removeprefix("s3://").split("/", 1)[0]
    # Another account's bucket of that name answers 403, and is never written to.
    head = ["s3api", "head-bucket", "--bucket", name, "--expected-bucket-owner", owner]
    if cmd.run(aws_cli(settings, *head), check=False).returncode or cmd.dry_run:
        create = ["s3api", "create-bucket", "--bucket", name]
        if settings["region"] != "us-east-1":  # us-east-1 takes no location constraint
            create += ["--create-bucket-configuration", f"LocationConstraint={settings['region']}"]
        cmd.run(aws_cli(settings, *create))
        closed = (
            "BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,"
            "RestrictPublicBuckets=true"
        )
        cmd.run(
            aws_cli(
                settings, "s3api", "put-public-access-block", "--bucket", name,
                "--public-access-block-configuration", closed, output="",
            )
        )  # fmt: skip
        encrypted = {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}
        cmd.run(
            aws_cli(
                settings, "s3api", "put-bucket-encryption", "--bucket", name,
                "--server-side-encryption-configuration", json.dumps(encrypted), output="",
            )
        )  # fmt: skip
    return bucket.rstrip("/")


def ensure_identity(settings: dict[str, Any], cmd: Commands) -> str:
    """The instance profile the VMs run as. The project's own (<project>-runner) is made on first
    use, its role's policy written again at every launch; a profile cloud.toml names is used as
    it is."""
    name = settings["instance_profile"]
    if name != f"{settings['project_name']}-runner":
        return name
    policy = aws_policies.runner(settings, account(settings, cmd))
    ensure_role(settings, name, aws_policies.trust("ec2.amazonaws.com"), policy, cmd)
    found = cmd.run(
        aws_cli(settings, "iam", "get-instance-profile", "--instance-profile-name", name),
        check=False,
    )
    if found.returncode != 0 or cmd.dry_run:
        cmd.run(
            aws_cli(settings, "iam", "create-instance-profile", "--instance-profile-name", name)
        )
        cmd.run(
            aws_cli(
                settings, "iam", "add-role-to-instance-profile", "--instance-profile-name", name,
                "--role-name", name,
            )
        )  # fmt: skip
    return name


def ensure_role(
    settings: dict[str, Any],
    name: str,
    trust: dict[str, Any],
    policy: dict[str, Any],
    cmd: Commands,
) -> str:
    """The project's role `name`, its ARN: made on first use (tagged as the project's) with
    `trust`, and `policy` written again as its one inline policy at every launch, so that it
    follows cloud.toml. A dry run shows every step."""
    found = cmd.run(
        aws_cli(settings, "iam", "get-role", "--role-name", name),
        check=False,
        dry_answer=json.dumps({"Role": {"Arn": f"arn:aws:iam::<account>:role/{name}"}}),
    )
    if found.returncode != 0 or cmd.dry_run:
        found = cmd.run(
            aws_cli(
                settings, "iam", "create-role", "--role-name", name,
                "--assume-role-policy-document", json.dumps(trust), "--tags", MANAGED_TAG,
            ),
            dry_answer=found.stdout,
        )  # fmt: skip
    cmd.run(
        aws_cli(
            settings, "iam", "put-role-policy", "--role-name", name, "--policy-name", name,
            "--policy-document", json.dumps(policy),
        )
    )  # fmt: skip
    return str(json.loads(found.stdout)["Role"]["Arn"])
