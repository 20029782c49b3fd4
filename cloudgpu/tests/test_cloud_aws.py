"""AWS with the real AWS CLI against moto_server, a local implementation of the AWS API: what
`invoke push --cloud=aws`, `train --cloud=aws`, `status` and `stop` make there.

moto proves that the CLI accepts our command lines and what they ask for; it does not prove that
AWS grants capacity, or that the Deep Learning AMI boots (its SSM name is reserved in moto, so
the tests pin an AMI moto has, as cloud.toml's `image` lets you)."""

from __future__ import annotations

import base64
import datetime
import json
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from baked_project import invoke_cli, project_env
from cloudgpu.testing import services

from cloudgpu import machines

pytestmark = pytest.mark.needs("aws")
DIGEST = "sha256:" + "7" * 64
SECRET = "token-fedcba9876543210"
ACCOUNT = "123456789012"  # moto's account


aws = services.aws


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One moto_server for the module (its state carries over: each test finds its own run)."""
    tmp_path = tmp_path_factory.mktemp("aws")
    with services.moto_env() as moto_env:
        env = project_env(
            **moto_env,
            CLOUD_RUNS=str(tmp_path / "runs"),
            DATA_TOKEN=SECRET,
        )
        ami = aws(env, "ec2", "describe-images", "--owners", "amazon")["Images"][0]["ImageId"]
        settings = tmp_path / "cloud.toml"
        settings.write_text(
            f'[aws]\nregion = "us-east-1"\nbucket = "s3://runs-bucket"\nimage = "{ami}"\n'
            '[secrets]\nDATA_TOKEN = "data-token"\n'
        )
        yield env | {"CLOUD_SETTINGS": str(settings)}


def instances(env: dict[str, str], run_id: str | None = None) -> list[dict]:
    """The instances on moto that are not terminated (of one run, when given; else of all)."""
    found = [
        instance
        for reservation in aws(env, "ec2", "describe-instances")["Reservations"]
        for instance in reservation["Instances"]
        if run_id or instance["State"]["Name"] != "terminated"
    ]
    if run_id is None:
        return found
    return [i for i in found if {"Key": "invoke-run", "Value": run_id} in i.get("Tags", [])]


def fake_docker(tmp_path: Path) -> Path:
    """A docker client that does nothing but answer `image inspect` as after a push."""
    script = tmp_path / "docker"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        "if sys.argv[1:3] == ['image', 'inspect']:\n"
        "    repository = sys.argv[-1].rsplit(':', 1)[0]\n"
        f"    print(json.dumps([dict(Id='sha256:1', RepoDigests=[repository + '@{DIGEST}'])]))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_push_makes_the_repository_and_records_the_digest(moto: dict, tmp_path: Path) -> None:
    env = moto | {"DOCKER": str(fake_docker(tmp_path))}
    done = invoke_cli("push", "--cloud=aws", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    (repository,) = aws(moto, "ecr", "describe-repositories")["repositories"]
    assert repository["repositoryName"] == "cloud-gpu-project"
    reference = f"{repository['repositoryUri']}@{DIGEST}"
    assert done.stdout.strip().endswith(f"digest {reference}")
    pushes = json.loads((Path(moto["CLOUD_RUNS"]) / "pushes.json").read_text())
    assert pushes["aws"]["image"] == reference


def test_a_spot_t4_run_is_a_g4dn_that_terminates_itself(moto: dict) -> None:
    image = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/project@{DIGEST}"
    done = invoke_cli(
        "train",
        "--cloud=aws",
        "--gpu=t4",
        "--spot",
        "--yes",
        "--detach",
        f"--image={image}",
        "--",
        "trainer=gpu",
        env=moto,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = done.stdout.split("started ", 1)[1].split(":", 1)[0]
    (instance,) = instances(moto, run_id)
    tags = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
    assert instance["InstanceType"] == "g4dn.xlarge"
    assert instance["InstanceLifecycle"] == "spot"
    assert instance["IamInstanceProfile"]["Arn"].endswith(
        "instance-profile/cloud-gpu-project-runner"
    )
    assert tags["invoke-managed"] == "true" and {"invoke-deadline", "invoke-creator"} <= set(tags)
    attribute = ["ec2", "describe-instance-attribute", "--instance-id", instance["InstanceId"]]
    behaviour = aws(moto, *attribute, "--attribute", "instanceInitiatedShutdownBehavior")
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    user_data = aws(moto, *attribute, "--attribute", "userData")["UserData"]["Value"]
    script = base64.b64decode(user_data).decode()
    assert f"IMAGE={image}" in script and f"RUN_ID={run_id}" in script
    assert SECRET not in script and "testing" not in script, "no secret in the user data"
    assert "SECRETS=DATA_TOKEN=data-token" in script
    role = "cloud-gpu-project-runner"
    policy = aws(moto, "iam", "get-role-policy", "--role-name", role, "--policy-name", role)
    granted, denied = {}, {}
    for statement in policy["PolicyDocument"]["Statement"]:
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            (granted if statement["Effect"] == "Allow" else denied)[action] = statement["Resource"]
    assert granted["s3:PutObject"] == "arn:aws:s3:::runs-bucket/*", "the project's bucket only"
    assert denied["s3:PutObject"].endswith("/endpoints/*"), "never the deployed models"
    closed = aws(moto, "s3api", "get-public-access-block", "--bucket", "runs-bucket")
    assert all(closed["PublicAccessBlockConfiguration"].values()), closed
    # Nothing gets in: the project's own group, with no inbound rule (not the VPC's default).
    (group,) = instance["SecurityGroups"]
    assert group["GroupName"] == "cloud-gpu-project-runs"
    (described,) = aws(moto, "ec2", "describe-security-groups", "--group-ids", group["GroupId"])[
        "SecurityGroups"
    ]
    assert described["IpPermissions"] == []
    attached = f"Name=attachment.instance-id,Values={instance['InstanceId']}"
    (volume,) = aws(moto, "ec2", "describe-volumes", "--filters", attached)["Volumes"]
    assert volume["Encrypted"] is True
    # The cloud's own cap: a one-time schedule terminates the instance at its deadline label.
    deadline = datetime.datetime.strptime(tags["invoke-deadline"], "%Y%m%d-%H%M%Sz")
    cap = aws(moto, "scheduler", "get-schedule", "--name", instance["InstanceId"])
    assert cap["ScheduleExpression"] == f"at({deadline:%Y-%m-%dT%H:%M:%S})"
    assert cap["ActionAfterCompletion"] == "DELETE"
    assert cap["Target"]["Arn"] == "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances"
    assert json.loads(cap["Target"]["Input"]) == {"InstanceIds": [instance["InstanceId"]]}
    assert cap["Target"]["RoleArn"].endswith(":role/cloud-gpu-project-deadline")
    assert granted["secretsmanager:GetSecretValue"] == [
        f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:data-token-??????"
    ]

    listed = invoke_cli("status", env=moto | {"CLOUD_SETTINGS": moto["CLOUD_SETTINGS"]})
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.startswith(run_id))
    assert "aws" in row and "1 x t4" in row and "running" in row

    stopped = invoke_cli("stop", "--run", run_id, env=moto)
    assert stopped.returncode == 0, stopped.stderr
    assert instances(moto, run_id)[0]["State"]["Name"] in ("shutting-down", "terminated")
    gone = subprocess.run(["aws", "scheduler", "get-schedule", "--name", instance["InstanceId"]],
                          env=moto, capture_output=True, text=True)  # fmt: skip
    assert gone.returncode != 0 and "ResourceNotFound" in gone.stderr, "stop deletes the cap"
    assert "s3://runs-bucket/" in stopped.stdout


def test_a_spot_cpu_run_is_the_cheapest_fit_with_the_trainers_threads(moto: dict) -> None:
    image = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/project@{DIGEST}"
    chosen = machines.cpu_offer("aws", 16, spot=True)
    done = invoke_cli(
        "train", "--cloud=aws", "--cpus=16", "--spot", "--yes", "--detach", f"--image={image}",
        env=moto,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = done.stdout.split("started ", 1)[1].split(":", 1)[0]
    (instance,) = instances(moto, run_id)
    assert instance["InstanceType"] == chosen.machine and instance["InstanceLifecycle"] == "spot"
    (disk,) = instance["BlockDeviceMappings"]
    assert disk["DeviceName"] == machines.vm_image("aws")["root_device"], "the image's own root"
    attribute = ["ec2", "describe-instance-attribute", "--instance-id", instance["InstanceId"]]
    behaviour = aws(moto, *attribute, "--attribute", "instanceInitiatedShutdownBehavior")
    assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    user_data = aws(moto, *attribute, "--attribute", "userData")["UserData"]["Value"]
    script = base64.b64decode(user_data).decode()
    assert "GPUS=0" in script and "HOST_TOOLS=1" in script
    assert f"OMP_NUM_THREADS={chosen.cores}" in script
    listed = invoke_cli("status", "--run", run_id, env=moto)
    assert f"16 vCPUs ({chosen.machine})" in listed.stdout, listed.stdout
    stopped = invoke_cli("stop", "--run", run_id, env=moto)
    assert stopped.returncode == 0, stopped.stderr


def test_a_run_on_a_private_subnet_has_no_public_address(moto: dict, tmp_path: Path) -> None:
    """cloud.toml's subnet and public_ip = false: the VM joins that subnet (its VPC gets the
    project's group) with no public address; its egress is the subnet's NAT's business."""
    vpc = aws(moto, "ec2", "create-vpc", "--cidr-block", "10.42.0.0/16")["Vpc"]["VpcId"]
    subnet = aws(moto, "ec2", "create-subnet", "--vpc-id", vpc, "--cidr-block", "10.42.1.0/24")
    subnet_id = subnet["Subnet"]["SubnetId"]
    settings = (
        Path(moto["CLOUD_SETTINGS"])
        .read_text()
        .replace("[aws]\n", f'[aws]\nsubnet = "{subnet_id}"\npublic_ip = false\n')
    )
    (tmp_path / "private.toml").write_text(settings)
    env = moto | {"CLOUD_SETTINGS": str(tmp_path / "private.toml")}
    image = f"123456789012.dkr.ecr.us-east-1.amazonaws.com/p@{DIGEST}"
    done = invoke_cli("train", "--cloud=aws", "--gpu=t4", "--yes", "--detach", f"--image={image}",
                      env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = done.stdout.split("started ", 1)[1].split(":", 1)[0]
    (instance,) = instances(moto, run_id)
    assert instance["SubnetId"] == subnet_id and instance["VpcId"] == vpc
    assert not instance.get("PublicIpAddress")
    (interface,) = instance["NetworkInterfaces"]  # the CLI puts subnet and group on it
    (group,) = interface["Groups"]
    (described,) = aws(moto, "ec2", "describe-security-groups", "--group-ids", group["GroupId"])[
        "SecurityGroups"
    ]
    assert described["VpcId"] == vpc and described["IpPermissions"] == []
    assert invoke_cli("stop", "--run", run_id, env=env).returncode == 0
    bad = env | {"CLOUD_SETTINGS": str(tmp_path / "bad.toml")}
    (tmp_path / "bad.toml").write_text(settings.replace(subnet_id, "subnet-0000000000000dead"))
    before = len(instances(moto))
    refused = invoke_cli(
        "train", "--cloud=aws", "--gpu=t4", "--yes", f"--image=x@{DIGEST}", env=bad
    )
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("error: cloud.toml [aws] subnet = 'subnet-0000000000000dead' is not")
    assert len(instances(moto)) == before, "a refused subnet starts no instance"
    assert " iam " not in refused.stderr and " s3" not in refused.stderr, "nothing made first"


def test_a_count_aws_does_not_offer_is_refused_with_the_choices(moto: dict) -> None:
    before = len(aws(moto, "ec2", "describe-instances")["Reservations"])
    done = invoke_cli(
        "train", "--cloud=aws", "--gpu=t4:2", "--yes", f"--image=x@{DIGEST}", env=moto
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --gpu t4:2: aws has no machine with 2 x t4; it offers t4:1, t4:4, t4:8"
    )
    assert len(aws(moto, "ec2", "describe-instances")["Reservations"]) == before


def test_no_terminal_and_no_yes_starts_nothing(moto: dict) -> None:
    before = len(aws(moto, "ec2", "describe-instances")["Reservations"])
    done = invoke_cli("train", "--cloud=aws", "--gpu=t4", f"--image=x@{DIGEST}", env=moto)
    assert done.returncode == 2
    assert "add --yes" in done.stderr and "$0." in done.stdout  # the price was shown
    assert len(aws(moto, "ec2", "describe-instances")["Reservations"]) == before


def test_a_missing_cli_and_a_missing_login_get_one_line_each(tmp_path: Path) -> None:
    bare = project_env(PATH="/usr/bin:/bin", CLOUD_RUNS=str(tmp_path / "runs"))
    done = invoke_cli("push", "--cloud=aws", env=bare | {"DOCKER": str(fake_docker(tmp_path))})
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: aws not found: pip install awscli (or the AWS CLI v2: https://aws.amazon.com/cli/)"
    )
    logged_out = project_env(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        CLOUD_RUNS=str(tmp_path / "runs"),
        DOCKER=str(fake_docker(tmp_path)),
    )
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        logged_out.pop(name, None)
    done = invoke_cli("push", "--cloud=aws", env=logged_out)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: not logged in to AWS: aws configure (or aws sso login)"
    )
