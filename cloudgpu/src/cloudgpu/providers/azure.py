"""Azure: a plan as `az` command lines. Each run gets a resource group of its own, so deleting
that group leaves nothing behind (VM, disk, network card, IP); Azure Container Registry holds the
image, Blob Storage the outputs, Key Vault the secrets, a user-assigned managed identity is the
VM's identity."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from ..commands import CloudError, Commands
from ..plan import DISK_GB, LABEL_PREFIX, Plan
from ..settings import NEEDED
from .azure_network import bastion_prefix, monitor_rules, nsg_name
from .azure_storage import copy_down, copy_up, read_text  # noqa: F401 (the provider's API)


def _az(*args: str) -> list[str]:
    return ["az", *args, "--output", "json"]


def registry_name(settings: dict[str, Any]) -> str:
    """The project's ACR: cloud.toml's `registry`, else the project's letters and digits and 8
    hex digits of the subscription's id. ACR names are global (5-50 letters and digits): from the
    project's name alone, every project of the default name would ask for the same one."""
    if settings.get("registry"):
        return str(settings["registry"])
    tag = hashlib.sha256(str(settings.get("subscription", "")).encode()).hexdigest()[:8]
    return re.sub(r"[^a-z0-9]", "", settings["project_name"].lower())[:42] + tag


def registry(settings: dict[str, Any]) -> str:
    return f"{registry_name(settings)}.azurecr.io"


def lasting(plan_bucket: str, settings: dict[str, Any], backend: str = "vm") -> list[str]:
    """What a run makes on first use that stays after it (each run reuses them)."""
    del backend  # the same on every backend: the identity is yours
    return [
        f"resource group {settings['resource_group']} with the container registry "
        f"{registry(settings)} (Basic tier: a fixed daily fee, whatever it holds)",
        f"blob container {plan_bucket.removeprefix('az://').split('/', 1)[0]} in the storage "
        f"account {settings['storage_account']}: the runs' outputs, billed per GB-month stored",
    ]


def own_registry(host: str, settings: dict[str, Any]) -> bool:
    """Whether `host` is the project's ACR, the only registry the VM's identity logs in to."""
    return host == registry(settings)


def ensure_repository(settings: dict[str, Any], cmd: Commands) -> str:
    name, group = registry_name(settings), settings["resource_group"]
    found = cmd.run(_az("acr", "show", "--name", name, "--resource-group", group), check=False)
    if found.returncode != 0 and not cmd.dry_run:
        cmd.run(_az("group", "create", "--name", group, "--location", settings["location"]))
        cmd.run(
            _az(
                "acr",
                "create",
                "--name",
                name,
                "--resource-group",
                group,
                "--sku",
                "Basic",
                "--tags",
                f"{LABEL_PREFIX}-managed=true",
            )
        )
    return f"{registry(settings)}/{settings['project_name']}"


def docker_login(settings: dict[str, Any], cmd: Commands, docker: str) -> None:
    del docker  # az acr login drives docker itself
    cmd.run(["az", "acr", "login", "--name", registry_name(settings)])


def ensure_bucket(settings: dict[str, Any], cmd: Commands) -> str:
    if not settings.get("storage_account"):
        raise CloudError(NEEDED["azure"]["storage_account"])
    return settings["bucket"].rstrip("/")


def tags(plan: Plan) -> list[str]:
    return [f"{key}={value}" for key, value in plan.labels.items()]


def create_commands(plan: Plan, script: str, bastion_prefix: str = "") -> list[list[str]]:
    """The run's resource group, then `az vm create` in it; `script` is the custom data file.
    With --monitor, first the VM's network security group (monitor_rules)."""
    from ..machines import boot_image

    assert plan.offer is not None
    settings, group = plan.settings, plan.run_id
    if not settings.get("identity"):
        raise CloudError(NEEDED["azure"]["identity"])
    vm = [
        "az",
        "vm",
        "create",
        "--resource-group",
        group,
        "--name",
        plan.run_id,
        "--location",
        plan.region,
        "--size",
        plan.offer.machine,
        "--image",
        boot_image(plan.offer)["urn"],
        "--custom-data",
        script,
        "--assign-identity",
        settings["identity"],
        "--os-disk-size-gb",
        str(DISK_GB),
        "--os-disk-delete-option",
        "Delete",
        "--nic-delete-option",
        "Delete",
        *(["--nsg", nsg_name(plan)] if plan.monitor else ["--nsg-rule", "NONE"]),  # no inbound port
        "--admin-username",
        "trainer",
        "--generate-ssh-keys",
        "--tags",
        *tags(plan),
        "--output",
        "json",
    ]
    if plan.zone:
        vm += ["--zone", plan.zone]
    if settings.get("subnet"):  # a shared network (its Bastion tunnels to --monitor VMs)
        vm += ["--subnet", settings["subnet"]]
    if not settings.get("public_ip", True):  # egress through the subnet's NAT gateway
        vm += ["--public-ip-address", ""]
    if plan.spot:
        # Never evicted for price (you pay the spot price, at most the standard one); an evicted
        # VM is deleted, not kept deallocated with its disk still billed.
        vm += ["--priority", "Spot", "--max-price", "-1", "--eviction-policy", "Delete"]
    group_create = _az(
        "group", "create", "--name", group, "--location", plan.region, "--tags", *tags(plan)
    )
    rules = monitor_rules(plan, bastion_prefix, tags(plan)) if plan.monitor else []
    return [group_create, *rules, vm, *_cap(plan)]


def _cap(plan: Plan) -> list[list[str]]:
    """The cloud's own cap: an auto-shutdown that deallocates the VM at the deadline's minute
    (compute billing ends; the disk stays until the group goes). It is a daily time, so only a
    run under 24 hours has one; the VM's watchdog deletes the group a minute before."""
    if plan.max_hours >= 24:
        return []
    at = f"{plan.deadline_time:%H%M}"  # UTC, rounded down to the minute
    return [_az("vm", "auto-shutdown", "--resource-group", plan.run_id, "--name", plan.run_id,
                "--time", at)]  # fmt: skip


def zones(settings: dict[str, Any], cmd: Commands) -> list[str]:
    """Azure's availability zones of a region, by number."""
    return ["1", "2", "3"]


def identity_principal(settings: dict[str, Any], cmd: Commands) -> str:
    """The principal (object) id of the VMs' user-assigned identity, which role assignments name."""
    done = cmd.run(
        ["az", "identity", "show", "--ids", settings["identity"], "--query", "principalId",
         "--output", "tsv"],
        dry_answer="<principal id of the identity>",
    )  # fmt: skip
    return done.stdout.strip()


def group_grant(principal: str, group_id: str) -> list[str]:
    """Contributor for the VM's identity on its run's group alone, so that the VM can delete the
    group at its end; the assignment goes with the group. No role above the group is needed."""
    return _az("role", "assignment", "create", "--assignee-object-id", principal,
               "--assignee-principal-type", "ServicePrincipal", "--role", "Contributor",
               "--scope", group_id)  # fmt: skip


def launch(plan: Plan, script: str, cmd: Commands) -> dict[str, Any]:
    prefix = bastion_prefix(plan.settings, cmd) if plan.monitor else ""  # before anything is made
    group_create, *rest = create_commands(plan, script, prefix)
    principal = identity_principal(plan.settings, cmd)
    subscription = plan.settings.get("subscription") or "<subscription>"
    planned_id = f"/subscriptions/{subscription}/resourceGroups/{plan.run_id}"
    made = cmd.run(group_create, dry_answer=json.dumps({"id": planned_id}))
    group_id = json.loads(made.stdout or "{}").get("id") or planned_id
    for command in [group_grant(principal, group_id), *rest]:
        try:
            cmd.run(command, dry_answer="{}")
        except CloudError as error:  # the group exists: leave nothing, nothing uncapped
            cmd.run(["az", "group", "delete", "--name", plan.run_id, "--yes", "--no-wait"])
            if command[:3] == ["az", "vm", "auto-shutdown"]:
                hint = "auto-shutdown needs: az provider register -n Microsoft.DevTestLab"
                raise CloudError(f"{error}; {hint}") from None
            raise
    return {"resource_group": plan.run_id}


def runs(settings: dict[str, Any], cmd: Commands) -> list[dict[str, Any]]:
    done = cmd.run(_az("group", "list", "--tag", f"{LABEL_PREFIX}-managed=true"), dry_answer="[]")
    found = []
    for group in json.loads(done.stdout or "[]"):
        labels = group.get("tags") or {}
        found.append(
            {
                "run": labels.get(f"{LABEL_PREFIX}-run", group["name"]),
                "id": group["name"],
                "resource_group": group["name"],
                "state": group.get("properties", {}).get("provisioningState", "").lower(),
                "deadline": labels.get(f"{LABEL_PREFIX}-deadline", ""),
            }
        )
    return found


def delete(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> None:
    group = record.get("resource_group") or record.get("id") or record["run"]  # the run's group
    cmd.run(["az", "group", "delete", "--name", str(group), "--yes", "--no-wait"])
