"""A cloud run planned before anything is paid for: every flag checked against the catalog and
the settings, the image pushed (or taken by digest), then the plan shown, with its price, and
confirmed (`invoke train --cloud=...`; remote_run.py starts it)."""

from __future__ import annotations

import datetime
import getpass
import os
import shutil
import sys
from typing import Any

from invoke import Context, Exit

from cloudgpu import CLIS, PROVIDERS, catalog, settings, summary
from cloudgpu.commands import INSTALL, CloudError, Commands
from cloudgpu.jobs import engines, skypilot
from cloudgpu.jobs.common import launcher
from cloudgpu.plan import Plan, PlanError, check_max_hours, check_nodes, check_run_id, new_run_id
from cloudgpu.vm import exporters

from .image import push_to
from .machine_flags import ANYWHERE, anywhere_offers, check_anywhere, choose_machine
from .project import DEFAULT_CLOUD, DEFAULT_LOGGER, IMAGE, LOGGER_KEYS, PACKAGE, framework

# The run's folder in the container; its outputs go to the bucket.
RUN_DIR = "/workspace/outputs/run"


def fail(error: Exception) -> Exit:
    return Exit(
        f"error: {error}", code=2 if isinstance(error, PlanError | catalog.CatalogError) else 1
    )


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def plan_run(
    c: Context,
    cloud: str,
    gpu: str,
    spot: bool,
    region: str,
    zone: str,
    image_ref: str,
    max_hours: str,
    resume: str,
    overrides: list[str],
    cmd: Commands,
    backend: str = "vm",
    nodes: str | int = 1,
    monitor: bool = False,
    cpus: str = "",
    memory: str = "",
    machine: str = "",
) -> Plan:
    """Check every flag against the catalog and settings, then make the run's plan."""
    anywhere: tuple[catalog.Offer, ...] = ()
    if cloud == ANYWHERE:
        check_anywhere(backend, region, zone, machine)
        cloud = settings.skypilot_home(DEFAULT_CLOUD)  # where the image and outputs live
        anywhere = anywhere_offers(gpu, cpus, memory, spot, backend)
    if cloud not in PROVIDERS:
        raise PlanError(
            f"--cloud {cloud!r}: choose one of {', '.join(PROVIDERS)}, or {ANYWHERE} (with "
            "--backend=skypilot: SkyPilot picks the cloud)"
        )
    node_count = check_nodes(backend, nodes)
    engine = engines.engine(backend, cloud) if backend != "vm" else None
    hours = check_max_hours(max_hours)
    offer = (
        max(anywhere, key=lambda each: each.on_demand)
        if anywhere
        else choose_machine(cloud, gpu, cpus, memory, machine, spot, backend)
    )
    if image_ref and "@sha256:" not in image_ref and not image_ref.startswith("sha256:"):
        raise PlanError(
            f"--image {image_ref}: give it by digest (repo@sha256:...), never a moving tag"
        )
    options, needs = settings.load(cloud, IMAGE), list[str]()
    if cmd.dry_run:  # the whole plan, placeholders for what is not set yet, then what is needed
        options, needs = settings.with_placeholders(cloud, options)
    watched = _monitor_overrides(cloud, backend, offer, options) if monitor else []
    for cli in (CLIS[cloud], *(["sky"] if backend == "skypilot" else [])):
        if shutil.which(cli) is None and not cmd.dry_run:
            raise CloudError(f"{cli} not found: {install_hint(cli)}")
    run_id = check_run_id(resume) if resume else new_run_id(IMAGE)
    if resume and backend == "vm":
        _refuse_a_running_run(cloud, run_id, options, cmd)
    chosen_region = region or options.get("region") or options.get("location") or ""
    chosen_zone = zone or (options.get("zone", "") if cloud == "gcp" else "")
    if cloud == "aws" and engine is None:  # a subnet AWS does not know stops here, first
        PROVIDERS[cloud].check_network(options, cmd)
    options["bucket"] = PROVIDERS[cloud].ensure_bucket(options, cmd)  # the identity names it
    bucket = f"{options['bucket']}/{IMAGE}/{run_id}"
    if engine is not None:  # each node runs the launcher; the service keeps the run folder
        container = launcher(PACKAGE, engine.run_dir(bucket), overrides)
        node_price: float | None
        if anywhere:  # the most a node can cost an hour, wherever SkyPilot starts it
            node_price, price_note = skypilot.bound(anywhere, spot)
            worst_node: float | None = node_price
        else:
            node_price, price_note = catalog.job_price(backend, offer, spot)  # type: ignore[arg-type]
            worst_node, _ = catalog.job_price(backend, offer, False)  # type: ignore[arg-type]
    else:
        if cloud == "aws":
            PROVIDERS[cloud].ensure_identity(options, cmd)
        container = framework.container_command(
            PACKAGE,
            max(offer.count, 1) if offer else 1,
            [f"hydra.run.dir={RUN_DIR}", *watched, *overrides],
            threads=offer.cores if offer else 0,
        )
        node_price, price_note, worst_node = None, "", None
    plan = Plan(
        run_id=run_id,
        cloud=cloud,
        offer=offer,
        spot=spot,
        region=chosen_region,
        zone=chosen_zone,
        image=image_ref or push_to(c, cloud, cpu=offer is None or offer.is_cpu, cmd=cmd),
        max_hours=hours,
        bucket=bucket,
        container=container,
        settings=options,
        secrets=dict(options["secrets"]),
        created=utc_now().isoformat(),
        user=getpass.getuser(),
        backend=backend,
        nodes=node_count,
        node_price=node_price,
        price_note=price_note,
        worst_node_price=worst_node,
        needs=needs,
        monitor=monitor,
        anywhere=anywhere,
    )
    if cloud == "gcp" and backend in ("vm", "managed"):  # the project's own, not the default
        plan.settings["service_account"] = PROVIDERS["gcp"].ensure_identity(
            plan.settings, plan.bucket, plan.image, cmd, vms=backend == "vm"
        )
    if engine is not None:
        engine.check(plan)
    return plan


# The states of a machine on its way out, as the providers' runs() list them.
GOING = frozenset({"shutting-down", "stopping", "terminated", "deleting", "suspending"})


def machine_up(listed: list[dict[str, Any]], run_id: str, going: frozenset[str] = GOING) -> bool:
    """Whether a provider's runs() lists the run's machine in a state not among `going`."""
    return any(entry.get("run") == run_id and str(entry.get("state", "")).lower() not in going
               for entry in listed)  # fmt: skip


def _refuse_a_running_run(cloud: str, run_id: str, options: dict[str, Any], cmd: Commands) -> None:
    """--resume of a run whose machine still runs would start a second writer of its outputs:
    refused. The cloud is asked (a read) where its CLI is here; a dry run goes on without."""
    if cloud != "local" and shutil.which(CLIS[cloud]) is None:
        return
    try:
        found = PROVIDERS[cloud].runs(options, Commands(verbose=False))
    except CloudError:
        if cmd.dry_run:  # placeholders for settings not made yet: nothing to ask about
            return
        raise
    if machine_up(found, run_id):
        raise PlanError(
            f"--resume {run_id}: the run is still running on {cloud}; stop it first "
            f"(invoke stop --run {run_id}), then resume it"
        )


def _monitor_overrides(
    cloud: str, backend: str, offer: catalog.Offer | None, options: dict[str, Any]
) -> list[str]:
    """What --monitor asks of the trainer (its /metrics on the VM's trainer port), once the
    exporters it runs beside are pinned and the cloud's tunnel can reach the VM."""
    if backend != "vm":
        raise PlanError(
            "--monitor is for --backend=vm: a training service reports its own nodes "
            "(CloudWatch, Cloud Monitoring, Azure Monitor)"
        )
    exporters.check_pinned(offer.count if offer else 0)
    missing = [key for key in ("subnet", "bastion", "bastion_group") if not options.get(key)]
    if cloud == "azure" and missing:
        raise PlanError(
            f"--monitor on Azure: set {', '.join(missing)} under [azure] in cloud.toml: a subnet "
            "of the network whose Bastion `invoke monitor --run ID` tunnels through, and only "
            "that Bastion reaches the metrics ports"
        )
    # The container's port is published on the VM; no announcement file inside it.
    port = exporters.trainer_port()
    return ["monitoring=prometheus", "monitoring.host=0.0.0.0", f"monitoring.port={port}",
            "monitoring.targets_dir=null"]  # fmt: skip


def install_hint(cli: str) -> str:
    return INSTALL[CLIS.get(cli, cli)]


# Stores where [secrets] live, for the hint of unsent_secrets().
STORES = {"aws": "Secrets Manager", "gcp": "Secret Manager", "azure": "Key Vault",
          "local": "this shell's environment"}  # fmt: skip


def unsent_secrets(plan: Plan, overrides: list[str]) -> list[str]:
    """What a run will not have that this shell does: the run's logger's key (LOGGER_KEYS), set
    here but not named under cloud.toml's [secrets] (a VM never gets this machine's environment)."""
    chosen = [o.removeprefix("logger=") for o in overrides if o.startswith("logger=")]
    logger = chosen[-1] if chosen else DEFAULT_LOGGER
    store = STORES.get(plan.cloud, "the cloud's secret store")
    return [
        f"{key} is set here but will not reach the run, whose {logger} logger then has none: put "
        f'it in {store} and name it under [secrets] in cloud.toml ({key} = "its name there")'
        for key in LOGGER_KEYS.get(logger, ())
        if os.environ.get(key) and key not in plan.secrets
    ]


def show(plan: Plan, cmd: Commands, estimate: str = "") -> None:
    """The plan's rows, with `estimate` (invoke estimate's time and cost) where there is one."""
    if plan.cloud == "aws" and plan.spot and not cmd.dry_run:
        live = PROVIDERS["aws"].live_spot_price(plan, cmd)
        if live is not None:
            print(f"live spot price of {plan.offer.machine} in {plan.region}: ${live:.4f}/h")  # type: ignore[union-attr]
    stays = PROVIDERS[plan.cloud].lasting(plan.bucket, plan.settings, plan.backend)
    notes = skypilot.notes(plan) if plan.backend == "skypilot" else []
    if plan.backend == "skypilot":
        stays.append("SkyPilot's jobs controller, a small on-demand CPU VM SkyPilot keeps for its "
                     "managed jobs: billed while it runs, not in the cap above (sky status "
                     "lists it)")  # fmt: skip
    estimated = [("estimate", estimate)] if estimate else []
    rows = [*summary.rows(plan), *notes, *estimated, *(("stays after it", what) for what in stays)]
    width = max(len(key) for key, _ in rows)
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")


def confirm(plan: Plan, yes: bool) -> None:
    """Ask before paying, unless --yes; never prompt without a terminal."""
    if yes or plan.cloud == "local":
        return
    if not sys.stdin.isatty():
        raise Exit("error: this run costs money: add --yes to start it without a terminal", 2)
    answer = input(f"Start it, at up to ${plan.cost_cap}? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise Exit("not started", 1)
