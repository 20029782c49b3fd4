"""What a monitored Azure VM's network lets in: its own network security group, in which the
Bastion's subnet, and nothing else, reaches the metrics ports (azure.py makes the VM with it).
Azure's default rules let every VM of the virtual network in (AllowVnetInBound, priority
65000); these rules come first. No other port is opened, on any Azure VM.
"""

from __future__ import annotations

from typing import Any

from ..commands import Commands
from ..plan import Plan


def nsg_name(plan: Plan) -> str:
    return f"{plan.run_id}-nsg"


def monitor_rules(plan: Plan, bastion_prefix: str, tags: list[str]) -> list[list[str]]:
    """The group (in the run's resource group, so it goes with it) and its two inbound rules."""
    from ..vm import exporters

    ports = [str(port) for port in exporters.ports(plan.offer.count if plan.offer else 0).values()]
    nsg, group = nsg_name(plan), plan.run_id
    rule = ["az", "network", "nsg", "rule", "create", "--resource-group", group,
            "--nsg-name", nsg, "--direction", "Inbound", "--protocol", "Tcp",
            "--destination-port-ranges", *ports]  # fmt: skip
    return [
        ["az", "network", "nsg", "create", "--resource-group", group, "--name", nsg,
         "--location", plan.region, "--tags", *tags, "--output", "json"],
        [*rule, "--name", "invoke-monitor-bastion", "--priority", "100", "--access", "Allow",
         "--source-address-prefixes", bastion_prefix, "--output", "json"],
        [*rule, "--name", "invoke-monitor-deny", "--priority", "110", "--access", "Deny",
         "--source-address-prefixes", "*", "--output", "json"],
    ]  # fmt: skip


def bastion_prefix(settings: dict[str, Any], cmd: Commands) -> str:
    """The address range of AzureBastionSubnet, where the Bastion's tunnels come from: the
    subnet of that fixed name in the virtual network of cloud.toml's `subnet`."""
    network = settings["subnet"].rsplit("/subnets/", 1)[0]
    done = cmd.run(
        ["az", "network", "vnet", "subnet", "show", "--ids",
         f"{network}/subnets/AzureBastionSubnet", "--query", "addressPrefix", "--output", "tsv"],
        dry_answer="<AzureBastionSubnet range>",
    )  # fmt: skip
    return done.stdout.strip()
