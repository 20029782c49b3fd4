"""Where AWS VMs sit on the network: a security group of the project's own with no inbound rule
(made on first use, in the VPC of the run's subnet), the subnet cloud.toml names (default: the
default VPC's subnet of the zone AWS picks), and a public address only where egress needs one.

Nothing reaches a run's VM from outside: logs, status and metrics leave it through the bucket
and Session Manager, so no rule lets anything in. A VPC's default group lets in everything
from its other members; this one does not.
"""

from __future__ import annotations

import json
from typing import Any

from ..commands import CloudError, Commands
from .aws_account import MANAGED_TAG, aws_cli


def group_name(settings: dict[str, Any]) -> str:
    return f"{settings['project_name']}-runs"


def vpc(settings: dict[str, Any], cmd: Commands) -> str:
    """The VPC of cloud.toml's subnet, else the region's default VPC (asked once per command:
    the plan asks first, so that a subnet AWS does not know stops the run before anything)."""
    if "_vpc" not in settings:
        settings["_vpc"] = _find_vpc(settings, cmd)
    return str(settings["_vpc"])


def _find_vpc(settings: dict[str, Any], cmd: Commands) -> str:
    if settings.get("subnet"):
        done = cmd.run(
            aws_cli(settings, "ec2", "describe-subnets", "--subnet-ids", settings["subnet"]),
            check=False,
            dry_answer='{"Subnets": [{"VpcId": "<vpc>"}]}',
        )
        if done.returncode != 0:
            raise CloudError(
                f"cloud.toml [aws] subnet = {settings['subnet']!r} is not a subnet of "
                f"{settings['region']} this account sees: aws ec2 describe-subnets lists them"
            )
        return str(json.loads(done.stdout)["Subnets"][0]["VpcId"])
    done = cmd.run(
        aws_cli(settings, "ec2", "describe-vpcs", "--filters", "Name=is-default,Values=true"),
        dry_answer='{"Vpcs": [{"VpcId": "<default vpc>"}]}',
    )
    found = json.loads(done.stdout)["Vpcs"]
    if not found:
        raise CloudError(
            f'{settings["region"]} has no default VPC: set subnet = "subnet-..." under [aws] '
            "in cloud.toml"
        )
    return str(found[0]["VpcId"])


def ensure_security_group(settings: dict[str, Any], cmd: Commands) -> str:
    """The id of the project's group in the run's VPC: no inbound rule, all outbound."""
    network = vpc(settings, cmd)
    name = group_name(settings)
    done = cmd.run(
        aws_cli(settings, "ec2", "describe-security-groups", "--filters",
                f"Name=group-name,Values={name}", f"Name=vpc-id,Values={network}"),
        dry_answer='{"SecurityGroups": []}',
    )  # fmt: skip
    found = json.loads(done.stdout)["SecurityGroups"]
    if found:
        return str(found[0]["GroupId"])
    tags = "ResourceType=security-group,Tags=[{" + MANAGED_TAG + "}]"
    made = cmd.run(
        aws_cli(settings, "ec2", "create-security-group", "--group-name", name,
                "--description", f"{settings['project_name']} runs: no inbound",
                "--vpc-id", network, "--tag-specifications", tags),
        dry_answer='{"GroupId": "<security group>"}',
    )  # fmt: skip
    return str(json.loads(made.stdout)["GroupId"])


def placement(settings: dict[str, Any], group: str) -> list[str]:
    """run-instances' network flags: the group, the subnet, and whether a public address."""
    flags = ["--security-group-ids", group]
    if settings.get("subnet"):
        flags += ["--subnet-id", settings["subnet"]]
        public = settings.get("public_ip", True)
        flags.append(
            "--associate-public-ip-address" if public else "--no-associate-public-ip-address"
        )
    return flags
