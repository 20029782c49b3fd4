"""AWS: a plan as `aws` command lines. EC2 for the VM (spot or on-demand, terminated when it shuts
down), S3 for the outputs, Secrets Manager for secrets; the account's repository, bucket and
identity are aws_account.py's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..commands import CloudError, Commands
from ..plan import DISK_GB, LABEL_PREFIX, Plan
from . import aws_account, aws_deadline, aws_network
from .aws_account import aws_cli

# The account's side of a run (tasks ask every provider module for these), in aws_account.py.
from .aws_account import docker_login as docker_login
from .aws_account import ensure_bucket as ensure_bucket
from .aws_account import ensure_repository as ensure_repository
from .aws_account import lasting as lasting
from .aws_account import own_registry as own_registry

# The Deep Learning Base AMI (NVIDIA driver, Docker, the NVIDIA container toolkit, the AWS CLI),
# as AWS publishes it in SSM; catalog.json names the parameter (machines.json a CPU machine's).
ROOT_DEVICE = "/dev/sda1"  # the Ubuntu DLAMI's root volume; an image may name its own


def machine_image(plan: Plan, image: dict[str, Any], cmd: Commands) -> str:
    """cloud.toml's `image` (an AMI id you pin), else the AMI behind the catalog's SSM parameter
    in the plan's region (the Deep Learning AMI's newest release)."""
    if plan.settings.get("image"):
        return str(plan.settings["image"])
    done = cmd.run(
        aws_cli(plan.settings, "ssm", "get-parameter", "--name", image["name"]),
        dry_answer='{"Parameter": {"Value": "<ami from ' + image["name"] + '>"}}',
    )
    return json.loads(done.stdout)["Parameter"]["Value"]


def tags(plan: Plan) -> str:
    return ",".join("{" + f"Key={key},Value={value}" + "}" for key, value in plan.labels.items())


def create_command(
    plan: Plan, ami: str, script: str, group: str, root_device: str = ROOT_DEVICE
) -> list[str]:
    """`aws ec2 run-instances` for the plan; `script` is the user data file. The disk is sized
    on the image's own root device: another name would add a second, empty volume."""
    assert plan.offer is not None
    command = [
        "aws",
        "ec2",
        "run-instances",
        "--region",
        plan.region,
        "--image-id",
        ami,
        "--instance-type",
        plan.offer.machine,
        "--count",
        "1",
        "--iam-instance-profile",
        f"Name={plan.settings['instance_profile']}",
        # A shutdown from inside (the end of startup.sh) terminates it: nothing left to bill.
        "--instance-initiated-shutdown-behavior",
        "terminate",
        # IMDSv2 only; two hops, so the training container can reach it too.
        "--metadata-options",
        "HttpTokens=required,HttpEndpoint=enabled,HttpPutResponseHopLimit=2",
        "--block-device-mappings",
        # Encrypted with the account's default EBS key.
        f"DeviceName={root_device},Ebs=" + "{" + f"VolumeSize={DISK_GB},VolumeType=gp3,"
        "DeleteOnTermination=true,Encrypted=true}",
        "--tag-specifications",
        f"ResourceType=instance,Tags=[{tags(plan)}]",
        f"ResourceType=volume,Tags=[{tags(plan)}]",
        "--user-data",
        f"file://{script}",
        *aws_network.placement(plan.settings, group),
        "--output",
        "json",
    ]
    if plan.zone and not plan.settings.get("subnet"):  # a subnet sits in one zone
        command += ["--placement", f"AvailabilityZone={plan.zone}"]
    if plan.spot:
        options = {
            "MarketType": "spot",
            "SpotOptions": {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
        command += ["--instance-market-options", json.dumps(options, separators=(",", ":"))]
    return command


def zones(settings: dict[str, Any], cmd: Commands) -> list[str]:
    """The region's availability zones, to try one after another when one has no capacity
    (none when cloud.toml names a subnet: it lies in one)."""
    if settings.get("subnet"):
        return []
    done = cmd.run(
        aws_cli(settings, "ec2", "describe-availability-zones"),
        check=False,
        quiet=True,
        dry_answer='{"AvailabilityZones": []}',
    )
    listed = (
        json.loads(done.stdout or "{}").get("AvailabilityZones", []) if not done.returncode else []
    )
    return [zone["ZoneName"] for zone in listed if zone.get("State", "available") == "available"]


def launch(plan: Plan, script: str, cmd: Commands) -> dict[str, Any]:
    """Start the VM; its instance id."""
    from ..machines import boot_image

    assert plan.offer is not None
    image = boot_image(plan.offer)
    ami = machine_image(plan, image, cmd)
    group = aws_network.ensure_security_group(plan.settings, cmd)
    done = cmd.run(
        create_command(plan, ami, script, group, image.get("root_device", ROOT_DEVICE)),
        dry_answer='{"Instances": [{"InstanceId": "i-dry-run"}]}',
    )
    instance = json.loads(done.stdout)["Instances"][0]["InstanceId"]
    try:
        aws_deadline.schedule(plan, instance, cmd)
    except CloudError as error:  # no VM is left without the cloud's own cap
        cmd.run(aws_cli(plan.settings, "ec2", "terminate-instances", "--instance-ids", instance))
        raise CloudError(f"{error}; instance {instance} terminated: it had no deadline") from None
    return {"instance_id": instance}


def check_network(settings: dict[str, Any], cmd: Commands) -> None:
    """The subnet cloud.toml names exists (or the region has a default VPC)."""
    aws_network.vpc(settings, cmd)


def ensure_identity(settings: dict[str, Any], cmd: Commands) -> str:
    """The VMs' instance profile, and the role their deadline schedules run as."""
    aws_deadline.ensure_role(settings, cmd)
    return aws_account.ensure_identity(settings, cmd)


def runs(settings: dict[str, Any], cmd: Commands) -> list[dict[str, Any]]:
    """Every instance a run made that is not terminated: run id, state, machine, launch time."""
    done = cmd.run(
        aws_cli(
            settings,
            "ec2",
            "describe-instances",
            "--filters",
            f"Name=tag:{LABEL_PREFIX}-managed,Values=true",
            "Name=instance-state-name,Values=pending,running,shutting-down,stopping,stopped",
        ),
        dry_answer='{"Reservations": []}',
    )
    found = []
    for reservation in json.loads(done.stdout)["Reservations"]:
        for instance in reservation["Instances"]:
            labels = {tag["Key"]: tag["Value"] for tag in instance.get("Tags", [])}
            found.append(
                {
                    "run": labels.get(f"{LABEL_PREFIX}-run", "?"),
                    "id": instance["InstanceId"],
                    "state": instance["State"]["Name"],
                    "machine": instance["InstanceType"],
                    "spot": instance.get("InstanceLifecycle") == "spot",
                    "started": str(instance.get("LaunchTime", "")),
                    "deadline": labels.get(f"{LABEL_PREFIX}-deadline", ""),
                }
            )
    return found


def delete(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> None:
    instance = record.get("instance_id") or record.get("id")
    if not instance:
        raise CloudError(f"run {record.get('run')} has no instance id to terminate")
    cmd.run(aws_cli(settings, "ec2", "terminate-instances", "--instance-ids", instance))
    aws_deadline.unschedule(settings, instance, cmd)


def read_text(uri: str, settings: dict[str, Any], cmd: Commands) -> str | None:
    """A file in the bucket, or None when it is not there (yet)."""
    done = cmd.run(aws_cli(settings, "s3", "cp", uri, "-", output=""), check=False, quiet=True)
    return done.stdout if done.returncode == 0 else None


def copy_up(local: str, uri: str, settings: dict[str, Any], cmd: Commands) -> None:
    """A file, or a folder's files, to the bucket."""
    verb = "sync" if Path(local).is_dir() else "cp"
    cmd.run(aws_cli(settings, "s3", verb, "--only-show-errors", local, uri, output=""))


def copy_down(uri: str, local: str, settings: dict[str, Any], cmd: Commands) -> None:
    """A folder of the bucket, here (what changed since the last copy)."""
    cmd.run(aws_cli(settings, "s3", "sync", "--only-show-errors", uri, local, output=""))


# EC2 quotas count vCPUs per family of instance types, spot apart (Service Quotas codes). The
# Standard ones count A, C, D, H, I, M, R, T and Z instances: every CPU machine of machines.json.
QUOTAS = {
    ("standard", False): (
        "L-1216C47A",
        "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    ),
    ("standard", True): (
        "L-34B43A08",
        "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests",
    ),
    ("g", False): ("L-DB2E81BA", "Running On-Demand G and VT instances"),
    ("g", True): ("L-3819A6DF", "All G and VT Spot Instance Requests"),
    ("p", False): ("L-417A185B", "Running On-Demand P instances"),
    ("p", True): ("L-7212CCBC", "All P4, P3 and P2 Spot Instance Requests"),
}


def quota_problem(plan: Plan, cmd: Commands) -> str | None:
    """The vCPU quota the machine would exceed, and how to raise it; None when it fits or when
    the quota cannot be read."""
    assert plan.offer is not None
    family = "standard" if plan.offer.is_cpu else plan.offer.machine[0]
    if (family, plan.spot) not in QUOTAS:
        return None
    code, name = QUOTAS[(family, plan.spot)]
    done = cmd.run(
        aws_cli(
            plan.settings,
            "service-quotas",
            "get-service-quota",
            "--service-code",
            "ec2",
            "--quota-code",
            code,
        ),
        check=False,
        quiet=True,
        dry_answer="{}",
    )
    value = (
        json.loads(done.stdout or "{}").get("Quota", {}).get("Value")
        if done.returncode == 0
        else None
    )
    if value is None or value >= plan.offer.vcpus:
        return None
    return (
        f"quota: {name} is {value:g} vCPUs in {plan.region}, and {plan.offer.machine} needs "
        f"{plan.offer.vcpus}: raise it (aws service-quotas request-service-quota-increase "
        f"--service-code ec2 --quota-code {code} --desired-value {plan.offer.vcpus})"
    )


def live_spot_price(plan: Plan, cmd: Commands) -> float | None:
    """The highest current spot price of the plan's machine over its region's zones, from AWS."""
    assert plan.offer is not None
    done = cmd.run(
        aws_cli(
            plan.settings,
            "ec2",
            "describe-spot-price-history",
            "--instance-types",
            plan.offer.machine,
            "--product-descriptions",
            "Linux/UNIX",
            "--max-items",
            "50",
        ),
        check=False,
        dry_answer='{"SpotPriceHistory": []}',
    )
    if done.returncode != 0:
        return None
    prices = [
        float(p["SpotPrice"]) for p in json.loads(done.stdout or "{}").get("SpotPriceHistory", [])
    ]
    return max(prices) if prices else None
