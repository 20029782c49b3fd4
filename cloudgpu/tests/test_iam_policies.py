"""The IAM policies AWS runs are given reach this project's repository, bucket and secrets, and
nothing else: by their own text here, by parliament and cloudsplaining (the IAM linters), and in
the dry run that prints them."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from baked_project import invoke_cli, project_env
from cloudgpu.providers import aws_policies
from cloudgpu.testing import iam, services

ACCOUNT = "123456789012"
DIGEST = "sha256:" + "7" * 64
# Actions that take no resource (AWS's Service Authorization Reference): the only "*" allowed.
NO_RESOURCE = {
    "ecr:GetAuthorizationToken",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
    "cloudwatch:PutMetricData",
}
# The ECR pull token (the linters call it credentials exposure): a pull cannot go without it, and
# it carries only the rights of the role, which may pull the project's repository and no other.
ACCEPTED = {("CREDENTIALS_EXPOSURE", ("ecr:getauthorizationtoken",)),
            ("CredentialsExposure", ("ecr:getauthorizationtoken",))}  # fmt: skip
# What the role was before (every object and every secret in the account): the linters must see it.
ACCOUNT_WIDE = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetObject", "s3:PutObject"],
         "Resource": "*"},
        {"Effect": "Allow", "Action": ["secretsmanager:GetSecretValue"], "Resource": "*"},
    ],
}  # fmt: skip


def settings(**changes: Any) -> dict[str, Any]:
    return {
        "region": "eu-west-1",
        "project_name": "proj",
        "bucket": "s3://proj-123456789012-eu-west-1",
        "data_buckets": [],
        "secrets": {"DATA_TOKEN": "data-token", "HF_TOKEN": "hf-token"},
    } | changes


POLICIES = {
    "runner": aws_policies.runner(settings(), ACCOUNT),
    "deadline": aws_policies.deadline(settings(), ACCOUNT, "proj"),
    "runner, bucket prefix, data bucket": aws_policies.runner(
        settings(bucket="s3://team-bucket/vision/", data_buckets=["s3://datasets/imagenet"]),
        ACCOUNT,
    ),
    "runner, no secrets": aws_policies.runner(settings(secrets={}), ACCOUNT),
    "sagemaker job": aws_policies.sagemaker_job(settings(), ACCOUNT),
    "sagemaker endpoint": aws_policies.sagemaker_endpoint(
        settings(), ACCOUNT, "s3://team-bucket/proj/endpoints/"
    ),
}


def statements(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return policy["Statement"]


def allowed(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [statement for statement in statements(policy) if statement["Effect"] == "Allow"]


def resources(statement: dict[str, Any]) -> list[str]:
    found = statement["Resource"]
    return [found] if isinstance(found, str) else found


def actions(statement: dict[str, Any]) -> list[str]:
    found = statement["Action"]
    return [found] if isinstance(found, str) else found


@pytest.mark.parametrize("name", POLICIES)
def test_no_wildcard_but_the_actions_that_take_no_resource(name: str) -> None:
    for statement in statements(POLICIES[name]):
        assert statement["Effect"] in ("Allow", "Deny") and "NotAction" not in statement
        assert all("*" not in action for action in actions(statement)), statement
        if "*" in resources(statement):
            assert set(actions(statement)) <= NO_RESOURCE, statement


def test_the_runner_reaches_its_repository_bucket_and_named_secrets_only() -> None:
    policy = POLICIES["runner"]
    granted = {a: r for s in allowed(policy) for a in actions(s) for r in resources(s)}
    assert granted["ecr:BatchGetImage"] == "arn:aws:ecr:eu-west-1:123456789012:repository/proj"
    assert granted["s3:PutObject"] == "arn:aws:s3:::proj-123456789012-eu-west-1/*"
    secrets = next(s for s in statements(policy) if s["Sid"] == "ReadTheNamedSecrets")
    assert resources(secrets) == [
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:data-token-??????",
        "arn:aws:secretsmanager:eu-west-1:123456789012:secret:hf-token-??????",
    ]
    assert not any(
        s["Sid"] == "ReadTheNamedSecrets" for s in statements(POLICIES["runner, no secrets"])
    )


def test_a_bucket_prefix_keeps_listing_and_objects_under_it() -> None:
    policy = POLICIES["runner, bucket prefix, data bucket"]
    by_sid = {s["Sid"]: s for s in statements(policy)}
    listing = by_sid["ListReadWriteTheProjectBucket"]
    assert listing["Resource"] == "arn:aws:s3:::team-bucket"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["vision/*"]}}
    assert by_sid["ReadWriteTheProjectBucket"]["Resource"] == "arn:aws:s3:::team-bucket/vision/*"
    data = by_sid["ReadData1"]
    assert data["Action"] == ["s3:GetObject"]
    assert data["Resource"] == "arn:aws:s3:::datasets/imagenet/*"


def test_the_sagemaker_job_writes_only_its_own_log_group() -> None:
    by_sid = {s["Sid"]: s for s in statements(POLICIES["sagemaker job"])}
    assert by_sid["WriteTheJobLogs"]["Resource"] == (
        "arn:aws:logs:eu-west-1:123456789012:log-group:/aws/sagemaker/TrainingJobs:*"
    )
    assert by_sid["PutTheJobMetrics"]["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/TrainingJobs"}
    }
    assert "SessionManagerAgent" not in by_sid


def significant(findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings above low, less the ECR token (ACCEPTED says why)."""
    return [
        f
        for f in findings
        if f["severity"] not in ("low", "info")
        and (f["issue"], tuple(f["actions"])) not in ACCEPTED
    ]


def test_an_endpoint_reads_the_model_archives_and_nothing_else_of_the_bucket() -> None:
    """It reads the archives and writes Data Capture's samples beside them: no run's files."""
    by_sid = {s["Sid"]: s for s in statements(POLICIES["sagemaker endpoint"])}
    assert set(by_sid) == {"RegistryToken", "PullTheProjectImage", "ReadTheModelArchives",
                           "WriteTheCapturedSamples", "WriteTheEndpointLogs"}  # fmt: skip
    archives, samples = by_sid["ReadTheModelArchives"], by_sid["WriteTheCapturedSamples"]
    assert (archives["Action"], archives["Resource"]) == (
        "s3:GetObject", "arn:aws:s3:::team-bucket/proj/endpoints/*"
    )  # fmt: skip
    assert (samples["Action"], samples["Resource"]) == (
        "s3:PutObject", "arn:aws:s3:::team-bucket/proj/endpoints/*/samples/*"
    )  # fmt: skip


@pytest.mark.needs("aws")
@pytest.mark.parametrize("name", ["runner", "runner, bucket prefix, data bucket"])
def test_a_run_cannot_write_or_delete_a_deployed_model_on_moto(name: str) -> None:
    """moto_server, its IAM checks on: a user with the run's policy writes its run's files, and
    is refused writing or deleting under <project>/endpoints/ (a training run must not replace
    the model an endpoint loads)."""
    config = {"runner, bucket prefix, data bucket": ("team-bucket", "vision/")}
    bucket, prefix = config.get(name, ("proj-123456789012-eu-west-1", ""))
    with services.moto_env() as moto_env:
        admin, url = {**os.environ, **moto_env}, moto_env["AWS_ENDPOINT_URL"]
        services.aws(admin, "s3api", "create-bucket", "--bucket", bucket)
        services.aws(admin, "iam", "create-user", "--user-name", "run")
        services.aws(admin, "iam", "put-user-policy", "--user-name", "run", "--policy-name", "run",
                     "--policy-document", json.dumps(POLICIES[name]))  # fmt: skip
        key = services.aws(admin, "iam", "create-access-key", "--user-name", "run")["AccessKey"]
        checks_on = {"Content-Type": "application/json"}  # moto's own API: check every request
        reset = urllib.request.Request(f"{url}/moto-api/reset-auth", b"0", checks_on)
        urllib.request.urlopen(reset).close()
        run = admin | {"AWS_ACCESS_KEY_ID": key["AccessKeyId"],
                       "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}  # fmt: skip

        def put(key: str, *verb: str) -> subprocess.CompletedProcess[str]:
            argv = ["aws", "s3api", *(verb or ("put-object",)), "--bucket", bucket,
                    "--key", f"{prefix}proj/{key}"]  # fmt: skip
            return subprocess.run(argv, env=run, capture_output=True, text=True, timeout=60)

        assert put("r-1/outputs/run/last.ckpt").returncode == 0
        for verb in [("put-object",), ("delete-object",)]:
            refused = put("endpoints/e/model.tar.gz", *verb)
            assert refused.returncode != 0 and "AccessDenied" in refused.stderr, refused.stderr


@pytest.mark.needs("iam-linters")
@pytest.mark.parametrize("name", POLICIES)
def test_the_iam_linters_find_nothing_above_low(name: str, tmp_path: Path) -> None:
    findings = iam.lint(POLICIES[name], tmp_path)
    assert significant(findings) == [], findings
    assert not [f for f in findings if f["issue"] == "RESOURCE_STAR"], findings


@pytest.mark.needs("iam-linters")
def test_the_iam_linters_catch_an_account_wide_policy(tmp_path: Path) -> None:
    findings = iam.lint(ACCOUNT_WIDE, tmp_path)
    flagged = {(f["linter"], f["issue"]) for f in significant(findings)}
    assert ("cloudsplaining", "DataExfiltration") in flagged, findings
    assert any(f["issue"] == "RESOURCE_STAR" for f in findings), "parliament: Resource *"


def printed_policy(stdout: str, role: str) -> dict[str, Any]:
    """The policy document of `aws iam put-role-policy --role-name ROLE` in a dry run."""
    line = next(
        line
        for line in stdout.splitlines()
        if "put-role-policy" in line and f"--role-name {role} " in line
    )
    document = line.split("--policy-document ", 1)[1].rsplit(" --region", 1)[0]
    return json.loads(document.strip("'"))


def test_the_dry_run_shows_the_role_it_makes_and_its_policy(tmp_path: Path) -> None:
    settings_file = tmp_path / "cloud.toml"
    settings_file.write_text(
        '[aws]\nbucket = "s3://team-bucket/vision"\n[secrets]\nTOKEN = "tok"\n'
    )
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(settings_file))
    done = invoke_cli(
        "train", "--cloud=aws", "--gpu=t4", f"--image=r@{DIGEST}", "--dry-run", env=env
    )
    assert done.returncode == 0, done.stdout + done.stderr
    role = "cloud-gpu-project-runner"
    assert f"aws iam create-role --role-name {role} " in done.stdout
    assert f"aws iam create-instance-profile --instance-profile-name {role} " in done.stdout
    policy = printed_policy(done.stdout, role)
    granted = {a: r for s in allowed(policy) for a in actions(s) for r in resources(s)}
    assert granted["s3:PutObject"] == "arn:aws:s3:::team-bucket/vision/*"
    assert granted["secretsmanager:GetSecretValue"].endswith(":secret:tok-??????")
    # The cloud's own cap and the role it runs as, shown too.
    deadline_role = "cloud-gpu-project-deadline"
    assert f"aws iam create-role --role-name {deadline_role} " in done.stdout
    assert "aws scheduler create-schedule --name i-dry-run " in done.stdout
    terminate = printed_policy(done.stdout, deadline_role)
    (statement,) = statements(terminate)
    assert actions(statement) == ["ec2:TerminateInstances"]
    assert statement["Condition"]["StringEquals"]["aws:ResourceTag/invoke-managed"] == "true"


@pytest.mark.parametrize("value", ['"s3://datasets"', '["gs://datasets"]', "[1]"])
def test_a_data_bucket_that_is_not_a_list_of_s3_uris_is_refused_in_one_line(
    value: str, tmp_path: Path
) -> None:
    settings_file = tmp_path / "cloud.toml"
    settings_file.write_text(f"[aws]\ndata_buckets = {value}\n")
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(settings_file))
    done = invoke_cli(
        "train", "--cloud=aws", "--gpu=t4", f"--image=r@{DIGEST}", "--dry-run", env=env
    )
    given = tomllib.loads(f"v = {value}")["v"]
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        f"error: cloud.toml [aws] data_buckets = {given!r}: give a list of s3:// URIs, "
        'e.g. ["s3://datasets/imagenet"]'
    ]
    assert not (tmp_path / "runs").exists()
