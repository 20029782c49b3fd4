"""`invoke monitor --run ID`: a monitored cloud run's metrics ports brought to this machine through
the cloud's own tunnel, with nothing opened to the internet:

    aws     Session Manager port forwarding (aws ssm start-session; the session-manager-plugin)
    gcp     IAP TCP forwarding (gcloud compute start-iap-tunnel; a firewall rule admits only
            IAP's range, 35.235.240.0/20, to the VMs tagged invoke-monitor)
    azure   Bastion (az network bastion tunnel; a Standard Bastion with native client support
            in the VM's virtual network: `bastion`, `bastion_group` and `subnet` in cloud.toml)
    local   none: the ports are on this machine's loopback already

Each tunnel listens on a free local port; Prometheus scrapes those.
"""

from __future__ import annotations

import json
import shutil
import socket
from dataclasses import dataclass
from typing import Any

from ..commands import CloudError
from . import exporters

IAP_RANGE = "35.235.240.0/20"  # where IAP's TCP forwarding connects from (Google's docs)
FIREWALL_RULE = "invoke-monitor-iap"
FIREWALL_DENY = "invoke-monitor-deny"  # every other source, the VPC's own VMs among them
IAP_PRIORITY = 1000  # GCP: lower wins; the deny comes right after
NETWORK_TAG = "invoke-monitor"
PLUGIN_INSTALL = (
    "install the Session Manager plugin: https://docs.aws.amazon.com/systems-manager/latest/"
    "userguide/session-manager-working-with-install-plugin.html"
)


@dataclass(frozen=True)
class Tunnel:
    source: str  # trainer, node, gpu
    remote_port: int
    local_port: int
    argv: list[str]  # the command that holds the tunnel open; [] where none is needed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def bind_address(cloud: str) -> str:
    """Where the VM's exporters listen: loopback where the tunnel arrives there (Session
    Manager, local), the VM's own addresses where it arrives at the network card (IAP, Bastion;
    the cloud's firewall keeps everyone else out)."""
    return "127.0.0.1" if cloud in ("aws", "local") else "0.0.0.0"


def tunnels(record: dict[str, Any], settings: dict[str, Any]) -> list[Tunnel]:
    """One tunnel per port the run serves (its trainer, node_exporter, dcgm-exporter)."""
    if not record.get("monitor"):
        raise CloudError(
            f"run {record['run']} was not started with --monitor: its VM serves no metrics "
            f"(invoke train --cloud={record['cloud']} --monitor ...)"
        )
    cloud = record["cloud"]
    found = []
    for source, port in exporters.ports(int(record.get("gpus", 0))).items():
        if cloud == "local":
            found.append(Tunnel(source, port, port, []))
            continue
        local = free_port()
        found.append(Tunnel(source, port, local, _command(cloud, record, settings, port, local)))
    return found


def _command(
    cloud: str, record: dict[str, Any], settings: dict[str, Any], port: int, local: int
) -> list[str]:
    if cloud == "aws":
        parameters = {"portNumber": [str(port)], "localPortNumber": [str(local)]}
        return [
            "aws", "ssm", "start-session", "--target", record["instance_id"],
            "--document-name", "AWS-StartPortForwardingSession",
            "--parameters", json.dumps(parameters, separators=(",", ":")),
            "--region", record["region"],
        ]  # fmt: skip
    if cloud == "gcp":
        return [
            "gcloud", "compute", "start-iap-tunnel", record["run"], str(port),
            f"--local-host-port=localhost:{local}", f"--zone={record['zone']}",
            f"--project={settings['project']}",
        ]  # fmt: skip
    if cloud == "azure":
        missing = [key for key in ("bastion", "bastion_group") if not settings.get(key)]
        if missing:
            raise CloudError(
                f"no Azure Bastion to tunnel through: set {' and '.join(missing)} under [azure] "
                "in cloud.toml (a Standard Bastion with native client support, in the VNet of "
                "`subnet`, where --monitor VMs go)"
            )
        vm = (
            f"/subscriptions/{settings['subscription']}/resourceGroups/{record['run']}/providers/"
            f"Microsoft.Compute/virtualMachines/{record['run']}"
        )
        return [
            "az", "network", "bastion", "tunnel", "--name", settings["bastion"],
            "--resource-group", settings["bastion_group"], "--target-resource-id", vm,
            "--resource-port", str(port), "--port", str(local),
        ]  # fmt: skip
    raise CloudError(f"--run {record['run']}: no tunnel for cloud {cloud!r}")


def check_tools(cloud: str) -> None:
    """CloudError naming what the tunnel needs on this machine and is missing."""
    if cloud == "aws" and shutil.which("session-manager-plugin") is None:
        raise CloudError(f"session-manager-plugin not found (aws ssm start-session needs it): "
                         f"{PLUGIN_INSTALL}")  # fmt: skip


def targets(record: dict[str, Any], found: list[Tunnel]) -> list[dict[str, Any]]:
    """file_sd entries for Prometheus: each tunnel's local port, labelled with the run."""
    return [
        {
            "targets": [f"127.0.0.1:{tunnel.local_port}"],
            "labels": {
                "cloud_run": record["run"],
                "cloud": record["cloud"],
                "source": tunnel.source,
            },
        }
        for tunnel in found
    ]


def firewall_rules(settings: dict[str, Any]) -> dict[str, list[str]]:
    """GCP: the rules, by name, that let IAP, and only IAP, reach a monitored VM's metrics
    ports: IAP's range allowed, then everything else denied. The deny outranks the network's
    own allow rules (the default network's lets every VM in the VPC in), the allow outranks it."""
    ports = ",".join(f"tcp:{port}" for port in exporters.ports(gpus=1).values())
    network = settings.get("network") or "default"
    common = [f"--project={settings['project']}", f"--network={network}", "--direction=INGRESS",
              f"--rules={ports}", f"--target-tags={NETWORK_TAG}", "--format=json"]  # fmt: skip
    return {
        FIREWALL_RULE: [
            "gcloud", "compute", "firewall-rules", "create", FIREWALL_RULE, *common,
            "--action=allow", f"--source-ranges={IAP_RANGE}", f"--priority={IAP_PRIORITY}",
        ],
        FIREWALL_DENY: [
            "gcloud", "compute", "firewall-rules", "create", FIREWALL_DENY, *common,
            "--action=deny", "--source-ranges=0.0.0.0/0", f"--priority={IAP_PRIORITY + 1}",
        ],
    }  # fmt: skip
