"""Azure: the exact `az` command lines of every GPU and spot case, and the real `az` (azure-cli,
offline) accepting their arguments. A valid command line gets as far as "Please run 'az login'";
a bad flag or value stops earlier, at the argument parser."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from baked_project import invoke_cli, project_env
from test_cloud_monitor import pinned

from cloudgpu import catalog, machines

CATALOG = json.loads(catalog.CATALOG.read_text())


def runs_here(gpu: str, count: int) -> bool:
    """Whether this project's GPU image runs on that machine (its CUDA against the GPU's)."""
    try:
        catalog.check_runs(catalog.offer("azure", gpu, count))
    except catalog.CatalogError:
        return False
    return True


CASES = [
    (gpu, int(count), spot)
    for gpu, counts in CATALOG["clouds"]["azure"]["gpus"].items()
    for count, entry in counts.items()
    for spot in (False, True)
    if (entry["spot"] is not None or not spot) and runs_here(gpu, int(count))
]
DIGEST = "sha256:" + "9" * 64
IMAGE = f"projectregistry.azurecr.io/project@{DIGEST}"
IDENTITY = (
    "/subscriptions/0000/resourceGroups/ops/providers/Microsoft.ManagedIdentity/"
    "userAssignedIdentities/runner"
)
AZ = os.environ.get("AZ_CLI") or shutil.which("az")


NETWORK = "/subscriptions/0000/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/hub"
PRIVATE = f'subnet = "{NETWORK}/subnets/runs"\npublic_ip = false\n'


def dry_run(
    tmp_path: Path, gpu: str, count: int, spot: bool, more: str = "", *extra: str
) -> list[list[str]]:
    """The az commands `invoke train --cloud=azure --dry-run` prints (`more`: cloud.toml lines,
    `extra`: more flags)."""
    settings = tmp_path / "cloud.toml"
    settings.write_text(
        f'[azure]\nresource_group = "ops"\nlocation = "eastus"\nidentity = "{IDENTITY}"\n'
        f'storage_account = "projectruns"\nbucket = "az://runs"\nsubscription = "0000"\n{more}'
    )
    env = project_env(
        CLOUD_SETTINGS=str(settings),
        CLOUD_RUNS=str(tmp_path / "runs"),
        CLOUD_EXPORTERS=str(pinned(tmp_path)),
    )
    flags = ["--spot", *extra] if spot else list(extra)
    chosen = [] if gpu.startswith("--") else [f"--gpu={gpu}:{count}"]  # or a flag: --cpus=8
    done = invoke_cli(
        "train",
        "--cloud=azure",
        *chosen,
        *([gpu] if gpu.startswith("--") else []),
        *flags,
        "--dry-run",
        f"--image={IMAGE}",
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("$ az ")]


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


@pytest.mark.parametrize(
    ("gpu", "count", "spot"), CASES, ids=[f"{g}:{n}{'-spot' if s else ''}" for g, n, s in CASES]
)
def test_the_vm_of_each_gpu_and_spot_case(tmp_path: Path, gpu: str, count: int, spot: bool) -> None:
    show, group, grant, vm, cap = dry_run(tmp_path, gpu, count, spot)
    run_id = flag(vm, "--name")
    # The identity's own right to delete the run's group: Contributor on that group alone.
    assert show[:3] == ["az", "identity", "show"] and flag(show, "--ids") == IDENTITY
    assert grant[:4] == ["az", "role", "assignment", "create"]
    assert flag(grant, "--role") == "Contributor"
    assert flag(grant, "--scope") == f"/subscriptions/0000/resourceGroups/{run_id}"
    assert flag(grant, "--assignee-principal-type") == "ServicePrincipal"
    # The cloud's own cap: an auto-shutdown at the deadline's minute (UTC).
    assert cap[:3] == ["az", "vm", "auto-shutdown"] and flag(cap, "--name") == run_id
    assert re.fullmatch(r"\d{4}", flag(cap, "--time"))
    assert group[:4] == ["az", "group", "create", "--name"] and group[4] == run_id
    assert vm[:3] == ["az", "vm", "create"] and flag(vm, "--resource-group") == run_id
    assert flag(vm, "--size") == CATALOG["clouds"]["azure"]["gpus"][gpu][str(count)]["machine"]
    assert flag(vm, "--image") == CATALOG["clouds"]["azure"]["image"]["urn"]
    assert flag(vm, "--assign-identity") == IDENTITY
    assert flag(vm, "--os-disk-delete-option") == "Delete"
    assert flag(vm, "--nic-delete-option") == "Delete"
    assert flag(vm, "--nsg-rule") == "NONE"
    assert Path(flag(vm, "--custom-data")).read_text().count(f"IMAGE={IMAGE}") == 1
    assert f"invoke-run={run_id}" in vm and "invoke-managed=true" in vm
    if spot:
        assert [flag(vm, "--priority"), flag(vm, "--max-price"), flag(vm, "--eviction-policy")] == [
            "Spot",
            "-1",
            "Delete",
        ]
    else:
        assert "--priority" not in vm
    assert "--public-ip-address" not in vm and "--subnet" not in vm


MONITORED = f'{PRIVATE}bastion = "hub"\nbastion_group = "net"\n'


def test_a_monitored_vm_admits_only_its_bastion_to_the_metrics_ports(tmp_path: Path) -> None:
    """Its own network security group: the Bastion's subnet may reach the exporters' ports,
    every other source (the virtual network's other VMs too) is denied before Azure's default
    rules let them in; no other port is opened."""
    commands = dry_run(tmp_path, "t4", 1, False, MONITORED, "--monitor")
    subnet, _, group, _, nsg, allow, deny, vm, _ = commands
    assert subnet[:5] == ["az", "network", "vnet", "subnet", "show"]
    assert flag(subnet, "--ids").endswith("/virtualNetworks/hub/subnets/AzureBastionSubnet")
    assert group[:3] == ["az", "group", "create"]
    assert nsg[:4] == ["az", "network", "nsg", "create"]
    run_id = flag(vm, "--name")
    assert flag(nsg, "--name") == flag(vm, "--nsg") == f"{run_id}-nsg"
    assert "--nsg-rule" not in vm
    for rule, access, source in (
        (allow, "Allow", "<AzureBastionSubnet range>"),
        (deny, "Deny", "*"),
    ):
        assert rule[:5] == ["az", "network", "nsg", "rule", "create"]
        assert flag(rule, "--access") == access and flag(rule, "--direction") == "Inbound"
        assert flag(rule, "--source-address-prefixes") == source
        ports = rule[rule.index("--destination-port-ranges") + 1 :][:3]
        assert ports == ["9464", "9100", "9400"]
    assert int(flag(allow, "--priority")) < int(flag(deny, "--priority")) < 65000


def test_a_vm_on_a_private_subnet_has_no_public_address(tmp_path: Path) -> None:
    *_, vm, _ = dry_run(tmp_path, "t4", 1, False, PRIVATE)
    assert flag(vm, "--subnet").endswith("/subnets/runs")
    assert flag(vm, "--public-ip-address") == ""


@pytest.mark.slow
@pytest.mark.needs("az")
@pytest.mark.parametrize("spot", [False, True], ids=["on-demand", "spot"])
def test_az_accepts_every_argument(tmp_path: Path, spot: bool) -> None:
    """Offline: az parses the whole command line and stops only because nobody is logged in
    (the spot case monitored, on a private subnet, with no public address)."""
    config = tmp_path / "azure"
    extra = ["--monitor"] if spot else []
    for command in dry_run(tmp_path, "t4", 1, spot, MONITORED if spot else "", *extra):
        done = subprocess.run(
            [str(AZ), *command[1:]],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "AZURE_CONFIG_DIR": str(config)},
        )
        assert "Please run 'az login'" in done.stderr, (command, done.stderr[-2000:])
        assert "unrecognized arguments" not in done.stderr


@pytest.mark.slow
@pytest.mark.needs("az")
def test_az_accepts_a_spot_cpu_vm_on_the_cpu_image(tmp_path: Path) -> None:
    chosen = machines.cpu_offer("azure", 8, spot=True)
    commands = dry_run(tmp_path, "--cpus=8", 0, True)
    (vm,) = [command for command in commands if command[:3] == ["az", "vm", "create"]]
    assert flag(vm, "--size") == chosen.machine and flag(vm, "--priority") == "Spot"
    assert flag(vm, "--image") == machines.vm_image("azure")["urn"]
    assert "GPUS=0" in Path(flag(vm, "--custom-data")).read_text()
    done = subprocess.run(
        [str(AZ), *vm[1:]], capture_output=True, text=True, timeout=300,
        env={**os.environ, "AZURE_CONFIG_DIR": str(tmp_path / "azure")},
    )  # fmt: skip
    assert "Please run 'az login'" in done.stderr, done.stderr[-2000:]
    assert "unrecognized arguments" not in done.stderr


def test_a_run_of_a_day_or_more_says_azure_has_no_cloud_cap_for_it(tmp_path: Path) -> None:
    """Azure's auto-shutdown is a daily time: past 24 h it would come early, so it is left
    out, and the summary says so."""
    settings = tmp_path / "cloud.toml"
    settings.write_text(f'[azure]\nidentity = "{IDENTITY}"\nstorage_account = "runs"\n')
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    done = invoke_cli("train", "--cloud=azure", "--gpu=t4", "--max-hours=30", "--dry-run",
                      f"--image={IMAGE}", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "$ az vm auto-shutdown" not in done.stdout
    assert "no cloud cap past 24 h on Azure: the VM's watchdog only" in done.stdout


def test_a_gpu_azure_lacks_is_refused_with_its_gpus(tmp_path: Path) -> None:
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"))
    done = invoke_cli(
        "train", "--cloud=azure", "--gpu=l4", "--dry-run", f"--image={IMAGE}", env=env
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --gpu l4: azure offers no l4 in the catalog; it offers t4, a10, v100, a100, "
        "a100-80gb, h100 (invoke gpus --cloud azure)"
    )


def test_a_group_whose_grant_is_refused_is_deleted_before_any_vm(tmp_path: Path) -> None:
    """The launcher may not assign roles: the run's group, just made, goes again, no VM is
    made, and the refusal is one line."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "az-calls"
    bin_dir.mkdir()
    (bin_dir / "az").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in\n'
        '  "identity show"*) echo principal-1 ;;\n'
        '  "group create"*) echo \'{"id": "/subscriptions/s/resourceGroups/g"}\' ;;\n'
        '  "role assignment create"*) echo "(AuthorizationFailed) The client may not perform'
        " action 'Microsoft.Authorization/roleAssignments/write'\" >&2; exit 1 ;;\n"
        '  *) echo "{}" ;;\n'
        "esac\n"
    )
    (bin_dir / "az").chmod(0o755)
    settings = tmp_path / "cloud.toml"
    settings.write_text(
        f'[azure]\nidentity = "{IDENTITY}"\nstorage_account = "runs"\nsubscription = "s"\n'
    )
    env = project_env(CLOUD_SETTINGS=str(settings), CLOUD_RUNS=str(tmp_path / "runs"))
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    done = invoke_cli("train", "--cloud=azure", "--gpu=t4", "--yes", "--detach",
                      f"--image={IMAGE}", env=env)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "AuthorizationFailed" in done.stderr.strip().splitlines()[-1]
    made = calls.read_text().splitlines()
    group = next(line for line in made if line.startswith("group create"))
    run_id = group.split("--name ")[1].split()[0]
    grant = next(line for line in made if line.startswith("role assignment create"))
    assert "--scope /subscriptions/s/resourceGroups/g" in grant and "principal-1" in grant
    assert f"group delete --name {run_id} --yes --no-wait" in made
    assert not any(line.startswith("vm create") for line in made)
