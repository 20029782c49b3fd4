"""Training on cloud GPUs: `invoke train --cloud=gcp --gpu=t4` (tasks/run.py hands over here),
and the runs' status, logs and stop; the GPU catalog; datasets to the project's bucket.

The work is in cloud/ (a plan, then each cloud's own CLI); these tasks take the flags, show the
price and ask before anything is paid for, and follow a run to its end.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import getpass
import json
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

from invoke import Context, Exit, task

from cloud import CLIS, PROVIDERS, catalog, exporters, jobs, runs, settings, startup
from cloud.commands import Capacity, CloudError, Commands
from cloud.plan import Plan, PlanError, check_max_hours, check_nodes, check_run_id, new_run_id

from . import framework, image, managed
from .project import DEFAULT_CLOUD, DEFAULT_GPU, IMAGE, PACKAGE

PUSHES = runs.RUNS / "pushes.json"  # the last push to each cloud
RUN_DIR = (
    "/workspace/outputs/run"  # the run's folder in the container; its outputs go to the bucket
)
FOLLOW_SECONDS = 10
# A run's log in its bucket, under outputs/: the trainer's own, uploaded as the run goes (a job's
# service keeps it too), and a VM's container's whole output, tracebacks too, uploaded at its end.
TRAINER_LOG, CONTAINER_LOG = "run/train.log", "logs/train.log"


def _fail(error: Exception) -> Exit:
    return Exit(
        f"error: {error}", code=2 if isinstance(error, PlanError | catalog.CatalogError) else 1
    )


# --- the image in the cloud's registry ---


def push_to(c: Context, cloud: str, cpu: bool, cmd: Commands) -> str:
    """Push this revision's image to `cloud`'s registry (made on first use); its ref@digest."""
    provider, options = PROVIDERS[cloud], settings.load(cloud, IMAGE)
    local_tag = image.tag(c, image.flavour(cpu))
    if cmd.dry_run:
        print(f"$ invoke build{' --cpu' if cpu else ''}   # unless {local_tag} is built")
    elif not image.exists(c, local_tag):
        print(f"no image {local_tag} yet: building it")
        image.build(c, cpu=cpu)
    repository = provider.ensure_repository(options, cmd)
    if not repository:  # --cloud=local without a registry: the engine runs it by its id
        return image.image_id(c, local_tag) if not cmd.dry_run else f"{local_tag}@<id>"
    provider.docker_login(options, cmd, image.DOCKER)
    remote = f"{repository}:{local_tag.rsplit(':', 1)[1]}"
    cmd.run([image.DOCKER, "tag", local_tag, remote])
    cmd.run([image.DOCKER, "push", remote])
    if cmd.dry_run:
        return f"{repository}@sha256:<digest of the push>"
    reference = image.pushed_digest(c, remote)
    pushes = json.loads(PUSHES.read_text()) if PUSHES.exists() else {}
    pushes[cloud] = {"image": reference, "tag": remote, "pushed": _now().isoformat()}
    PUSHES.parent.mkdir(parents=True, exist_ok=True)
    PUSHES.write_text(json.dumps(pushes, indent=2) + "\n")
    return reference


# --- a run ---


def _now() -> datetime.datetime:
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
) -> Plan:
    """Check every flag against the catalog and settings, then make the run's plan."""
    if cloud not in PROVIDERS:
        raise PlanError(f"--cloud {cloud!r}: choose one of {', '.join(PROVIDERS)}")
    node_count = check_nodes(backend, nodes)
    engine = jobs.engine(backend, cloud) if backend != "vm" else None
    hours = check_max_hours(max_hours)
    name, count = catalog.parse_gpu(gpu or DEFAULT_GPU)
    offer = None
    if cloud != "local":
        offer = catalog.offer(cloud, name, count)
        catalog.check_runs(offer)
        if spot and offer.spot is None:
            raise PlanError(
                f"--spot: the catalog has no spot price for {offer.machine} on {cloud} "
                "(not offered as spot there): drop --spot, or choose another GPU"
            )
    if image_ref and "@sha256:" not in image_ref and not image_ref.startswith("sha256:"):
        raise PlanError(
            f"--image {image_ref}: give it by digest (repo@sha256:...), never a moving tag"
        )
    options = settings.load(cloud, IMAGE)
    watched = _monitor_overrides(cloud, backend, offer, options) if monitor else []
    for cli in (CLIS[cloud], *(["sky"] if backend == "skypilot" else [])):
        if shutil.which(cli) is None and not cmd.dry_run:
            raise CloudError(f"{cli} not found: {_install(cli)}")
    run_id = check_run_id(resume) if resume else new_run_id(IMAGE)
    chosen_region = region or options.get("region") or options.get("location") or ""
    chosen_zone = zone or (options.get("zone", "") if cloud == "gcp" else "")
    bucket = f"{PROVIDERS[cloud].ensure_bucket(options, cmd)}/{IMAGE}/{run_id}"
    if engine is not None:  # each node runs the launcher; the service keeps the run folder
        container = jobs.launcher(PACKAGE, engine.run_dir(bucket), overrides)
        node_price, price_note = catalog.job_price(backend, offer, spot)  # type: ignore[arg-type]
    else:
        if cloud == "aws":
            PROVIDERS[cloud].ensure_identity(options, cmd)
        container = framework.container_command(
            PACKAGE, offer.count if offer else 1, [f"hydra.run.dir={RUN_DIR}", *watched, *overrides]
        )
        node_price, price_note = None, ""
    plan = Plan(
        run_id=run_id,
        cloud=cloud,
        offer=offer,
        spot=spot,
        region=chosen_region,
        zone=chosen_zone,
        image=image_ref or push_to(c, cloud, cpu=cloud == "local", cmd=cmd),
        max_hours=hours,
        bucket=bucket,
        container=container,
        settings=options,
        secrets=dict(options["secrets"]),
        created=_now().isoformat(),
        user=getpass.getuser(),
        backend=backend,
        nodes=node_count,
        node_price=node_price,
        price_note=price_note,
        monitor=monitor,
    )
    if engine is not None:
        engine.check(plan)
    return plan


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
    if cloud == "azure" and not options.get("subnet"):
        raise PlanError(
            "--monitor on Azure: set subnet = ... under [azure] in cloud.toml, a subnet of the "
            "network whose Bastion `invoke monitor --run ID` tunnels through"
        )
    # The container's port is published on the VM; no announcement file inside it.
    port = exporters.trainer_port()
    return ["monitoring=prometheus", "monitoring.host=0.0.0.0", f"monitoring.port={port}",
            "monitoring.targets_dir=null"]  # fmt: skip


def _install(cli: str) -> str:
    from cloud.commands import INSTALL

    return INSTALL[CLIS.get(cli, cli)]


def show(plan: Plan, cmd: Commands) -> None:
    if plan.cloud == "aws" and plan.spot and not cmd.dry_run:
        live = PROVIDERS["aws"].live_spot_price(plan, cmd)
        if live is not None:
            print(f"live spot price of {plan.offer.machine} in {plan.region}: ${live:.4f}/h")  # type: ignore[union-attr]
    width = max(len(key) for key, _ in plan.summary())
    for key, value in plan.summary():
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


def launch(plan: Plan, cmd: Commands, detach: bool) -> dict[str, Any]:
    """Write the startup script and start the machine, trying the region's other zones when
    one has no capacity."""
    script_text = startup.render(plan, _registry_host(plan))
    if cmd.dry_run:
        print("--- startup script ---")
        print(script_text)
        print("--- end of startup script ---")
    script = runs.folder(plan.run_id) / "startup.sh"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(script_text)
    provider = PROVIDERS[plan.cloud]
    if plan.cloud == "local":
        return provider.launch(plan, str(script), cmd, detach=detach)
    others = [zone for zone in provider.zones(plan.settings, cmd) if zone != plan.zone]
    for attempt in [plan, *(dataclasses.replace(plan, zone=zone) for zone in others)]:
        try:
            ids = provider.launch(attempt, str(script), cmd)
        except Capacity as error:
            print(f"{attempt.zone or plan.region}: {error}", file=sys.stderr)
            continue
        return ids | {"zone": attempt.zone}
    raise CloudError(
        f"no zone of {plan.region} has capacity for {plan.offer.machine} now: try --region, "  # type: ignore[union-attr]
        f"{'dropping --spot, ' if plan.spot else ''}or a smaller GPU (invoke gpus)"
    )


def _registry_host(plan: Plan) -> str:
    return plan.image.split("/", 1)[0] if "/" in plan.image else ""


def print_log(
    bucket: str,
    provider: Any,
    options: dict[str, Any],
    ended: Callable[[], Any],
    every: float,
    follow: bool = True,
) -> Any:
    """Print a run's log from its bucket: as it grows, every `every` seconds, until `ended()`
    answers (a VM run's status.json, a job's end state), or once without `follow`; the answer.

    What grows is the trainer's own log. Once the run has ended, what the container printed
    after the trainer's last line (a traceback, say) follows it, from the container's output."""
    cmd = Commands(verbose=False)

    def read(name: str) -> list[str]:
        return (provider.read_text(f"{bucket}/outputs/{name}", options, cmd) or "").splitlines()

    shown: list[str] = []
    while True:
        answer = ended()
        lines = read(TRAINER_LOG)
        for line in lines[len(shown) :]:
            print(line)
        shown = lines
        if answer:
            for line in _after(read(CONTAINER_LOG), shown[-1] if shown else None):
                print(line)
            return answer
        if not follow:
            if not shown:
                print(f"no log in {bucket}/outputs yet (uploaded every few minutes)")
            return answer
        time.sleep(every)


def _after(output: list[str], last: str | None) -> list[str]:
    """The lines of `output` after its last `last`: all of them for None, none if it is absent."""
    if last is None:
        return output
    if last not in output:
        return []
    return output[len(output) - output[::-1].index(last) :]


def follow_run(plan: Plan, cmd: Commands) -> dict[str, Any]:
    """Print the run's log from the bucket as it grows; its status.json once it has ended."""
    provider, options = PROVIDERS[plan.cloud], plan.settings

    def status() -> dict[str, Any] | None:
        text = provider.read_text(f"{plan.bucket}/outputs/status.json", options, cmd)
        return json.loads(text) if text else None

    return dict(print_log(plan.bucket, provider, options, status, FOLLOW_SECONDS))


def run_in_cloud(
    c: Context,
    cloud: str,
    gpu: str,
    spot: bool,
    region: str,
    zone: str,
    image_ref: str,
    max_hours: str,
    dry_run: bool,
    detach: bool,
    yes: bool,
    resume: str,
    retries: int,
    overrides: list[str],
    backend: str = "vm",
    nodes: str = "1",
    monitor: bool = False,
) -> None:
    """The whole of `invoke train --cloud=...`."""
    cmd = Commands(dry_run=dry_run)
    try:
        plan = plan_run(
            c, cloud, gpu, spot, region, zone, image_ref, max_hours, resume, overrides, cmd,
            backend, nodes, monitor,
        )  # fmt: skip
        show(plan, cmd)
        if not plan.is_job:  # a VM's quota; the services check their own when they schedule
            problem = getattr(PROVIDERS[cloud], "quota_problem", lambda *_: None)(plan, cmd)
            if problem:
                raise CloudError(problem)
        if not dry_run:
            confirm(plan, yes)
        if plan.is_job:
            run_job(plan, cmd, detach, retries)
            return
        for attempt in range(retries + 1):
            if not dry_run:
                runs.save(plan, {})  # before the machine starts: a run is never unrecorded
            ids = launch(plan, cmd, detach)
            if dry_run:
                return
            runs.update(plan.run_id, **ids)
            if detach:
                print(
                    f"started {plan.run_id}: invoke logs --run {plan.run_id} --follow; "
                    f"invoke status --run {plan.run_id}; invoke stop --run {plan.run_id}"
                )
                return
            status = _ended(plan, cmd, ids)
            runs.update(plan.run_id, status=status)
            print(f"run {plan.run_id} {status.get('reason')}: outputs in {plan.bucket}/outputs")
            if status.get("reason") != "preempted" or attempt == retries:
                if status.get("reason") != "finished":
                    raise Exit(f"run {plan.run_id} {status.get('reason')}", code=1)
                return
            print(f"preempted: relaunching {plan.run_id} (retry {attempt + 1} of {retries})")
    except (PlanError, catalog.CatalogError, CloudError) as error:
        raise _fail(error) from None


def run_job(plan: Plan, cmd: Commands, detach: bool, retries: int) -> None:
    """Submit the plan's job to the service, then follow it (unless --detach). A preempted job
    the service does not restart itself (Azure ML's) is resubmitted, up to --retries times, and
    resumes from the checkpoint in the run's folder."""
    earlier = (runs.load(plan.run_id) or {}).get("job")  # --resume: the run's last job
    for attempt in range(retries + 1):
        if attempt or earlier:  # the services keep a job's name: a new submission, a new name
            plan = dataclasses.replace(plan, job_name=f"{plan.run_id}-r{secrets.token_hex(2)}")
        if not cmd.dry_run:
            runs.save(plan, {"backend": plan.backend, "nodes": plan.nodes})
        try:
            ids = managed.submit(plan, cmd)
        except CloudError:
            if not cmd.dry_run:  # recorded as ended: nothing runs, nothing to stop
                runs.update(plan.run_id, status={"reason": "not submitted"})
            raise
        if cmd.dry_run:
            return
        runs.update(plan.run_id, **ids)
        if detach:
            print(
                f"submitted {plan.run_id} ({ids['job']}): invoke logs --run {plan.run_id} "
                f"--follow; invoke status --run {plan.run_id}; invoke stop --run {plan.run_id}"
            )
            return
        record = runs.load(plan.run_id) or {}
        provider = PROVIDERS[plan.cloud]
        ended = functools.partial(managed.ended, record, plan.settings)
        state = print_log(plan.bucket, provider, plan.settings, ended, managed.FOLLOW_SECONDS)
        runs.update(plan.run_id, status={"reason": state["state"]})
        print(f"run {plan.run_id} {state['state']}: outputs in {plan.bucket}/outputs")
        if state["state"] == "finished":
            return
        if state["state"] != "preempted" or attempt == retries:
            raise Exit(f"run {plan.run_id} {state['state']}", code=1)
        print(f"preempted: resubmitting {plan.run_id} (retry {attempt + 1} of {retries})")


def _ended(plan: Plan, cmd: Commands, ids: dict[str, Any]) -> dict[str, Any]:
    """status.json of a finished foreground run (local), or followed from the bucket."""
    if plan.cloud == "local":
        text = PROVIDERS["local"].read_text(
            f"{plan.bucket}/outputs/status.json", plan.settings, cmd
        )
        return json.loads(text) if text else {"reason": "failed", "exit_code": ids.get("exit_code")}
    return follow_run(plan, cmd)


# --- status, logs, stop, gpus ---


def _clouds(cloud: str) -> list[str]:
    """The clouds to ask: the one given, else those with runs recorded here and the default."""
    if cloud:
        if cloud not in PROVIDERS:
            raise Exit(f"error: --cloud {cloud!r}: choose one of {', '.join(PROVIDERS)}", 2)
        return [cloud]
    known = {record["cloud"] for record in runs.all_records()} | {DEFAULT_CLOUD}
    return [name for name in PROVIDERS if name in known]


def _run_id(run: str) -> str:
    """--run's value, checked: one line and exit status 2 when it cannot be a run id."""
    try:
        return check_run_id(run, "--run")
    except PlanError as error:
        raise _fail(error) from None


def _record(run_id: str) -> dict[str, Any]:
    record = runs.load(_run_id(run_id))
    if record is None:
        raise Exit(f"error: --run {run_id}: no such run here (invoke status lists them)", 2)
    return record


@task(
    help={
        "run": "one run's details (default: every run, with its state and cost so far)",
        "cloud": "ask only this cloud: aws, gcp, azure or local",
    }
)
def status(c: Context, run: str = "", cloud: str = "") -> None:
    """The cloud runs: cloud, GPU, state, uptime, cost so far, deadline; past ones flagged."""
    now = _now()
    rows: list[list[str]] = []
    seen: set[str] = set()
    for name in _clouds(cloud):
        if shutil.which(CLIS[name]) is None:
            print(f"({name} not asked: {CLIS[name]} not found; {_install(name)})")
            continue
        try:
            found_runs = PROVIDERS[name].runs(settings.load(name, IMAGE), Commands(verbose=False))
        except CloudError as error:
            if cloud:  # asked for by name: its error is the answer
                raise _fail(error) from None
            print(f"({name} not asked: {error})")
            continue
        for found in found_runs:
            if run and found["run"] != run:
                continue
            record = runs.load(found["run"]) or {}
            seen.add(found["run"])
            rows.append(_status_row(name, found, record, now))
    for record in runs.all_records():  # jobs, and ended runs, this machine started
        if (
            record["run"] in seen
            or (run and record["run"] != run)
            or (cloud and record["cloud"] != cloud)
        ):
            continue
        if record.get("backend", "vm") != "vm" and "status" not in record:
            rows.append(managed.status_row(record, settings.load(record["cloud"], IMAGE)))
            continue
        state = record.get("status", {}).get("reason", "ended")
        rows.append(
            [record["run"], record["cloud"], record["gpu"], state, "-", "-", record["deadline"]]
        )
    header = ["RUN", "CLOUD", "GPU", "STATE", "UPTIME", "COST SO FAR", "DEADLINE"]
    _table([header, *rows]) if rows else print("no cloud runs")


def _status_row(
    cloud: str, found: dict[str, Any], record: dict[str, Any], now: datetime.datetime
) -> list[str]:
    hours = runs.uptime_hours(record, now) if record else 0.0
    price = record.get("price") or 0.0
    deadline = record.get("deadline") or found.get("deadline", "")
    late = bool(record) and runs.past_deadline(record, now)
    return [
        found["run"],
        cloud,
        record.get("gpu", found.get("machine", "?")),
        found["state"] + ("  PAST ITS DEADLINE: invoke stop --run " + found["run"] if late else ""),
        f"{hours:.2f} h",
        f"${hours * price:.2f}" if record else "?",
        deadline,
    ]


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(f"{cell!s:<{width}}" for cell, width in zip(row, widths, strict=True)))


@task(help={"run": "the run's id (invoke status)", "follow": "keep printing as the log grows"})
def logs(c: Context, run: str = "", follow: bool = False) -> None:
    """A cloud run's training log, from its bucket: invoke logs --run ID [--follow]."""
    if not run:
        raise Exit("error: invoke logs needs --run ID (invoke status lists the runs)", 2)
    record = _record(run)
    provider, options = PROVIDERS[record["cloud"]], settings.load(record["cloud"], IMAGE)
    ended = functools.partial(_ended_state, record, provider, options, Commands(verbose=False))
    state = print_log(record["bucket"], provider, options, ended, FOLLOW_SECONDS, follow)
    if state:
        print(f"[run ended: {state}]")


def _ended_state(
    record: dict[str, Any], provider: Any, options: dict[str, Any], cmd: Commands
) -> str:
    """How the run ended ('' while it runs): a job's state from its service, a VM run's from
    the status.json its VM uploads last."""
    if record.get("backend", "vm") != "vm":
        try:
            state = str(managed.describe(record, options)["state"])
        except CloudError as error:
            raise _fail(error) from None
        return state if state in jobs.ENDED else ""
    text = provider.read_text(f"{record['bucket']}/outputs/status.json", options, cmd)
    return str(json.loads(text).get("reason")) if text else ""


@task(
    help={
        "run": "the run's id (invoke status)",
        "dry_run": "print the command that stops it; stop nothing",
    }
)
def stop(c: Context, run: str = "", dry_run: bool = False) -> None:
    """Stop a cloud run: delete its machine, or cancel its job; says where its outputs are."""
    if not run:
        raise Exit("error: invoke stop needs --run ID (invoke status lists the runs)", 2)
    record = runs.load(_run_id(run)) or {"run": run, "cloud": DEFAULT_CLOUD}
    options = settings.load(record["cloud"], IMAGE)
    cmd = Commands(dry_run=dry_run)
    job = record.get("backend", "vm") != "vm"
    try:
        if job:
            managed.cancel(record, options, cmd)
        else:
            PROVIDERS[record["cloud"]].delete(options, record, cmd)
    except CloudError as error:
        raise _fail(error) from None
    if dry_run:
        return
    runs.update(run, status={"reason": "stopped"})
    where = record.get("bucket", "the project's bucket")
    what = (
        f"its job {record.get('job')} is being stopped" if job else "its machine is being deleted"
    )
    print(
        f"stopped {run}: {what}. Saved: what it uploaded to {where}/outputs "
        f"(checkpoints every few minutes, and at a graceful stop); resume with "
        f"invoke train --cloud={record['cloud']} --resume {run}"
        + (f" --backend={record['backend']}" if job else "")
    )


@task(help={"cloud": "one cloud's offers (default: every cloud's)"})
def gpus(c: Context, cloud: str = "") -> None:
    """The GPU catalog: machine, vCPUs, memory, on-demand and spot $/h, and their source."""
    if cloud and cloud not in catalog.CLOUDS:
        raise Exit(f"error: --cloud {cloud!r}: choose one of {', '.join(catalog.CLOUDS)}", 2)
    rows = [["CLOUD", "GPU", "MACHINE", "vCPU", "GiB", "ON-DEMAND $/h", "SPOT $/h", "REGION"]]
    for offer in catalog.rows(cloud or None):
        spot = f"{offer.spot:.4f}" if offer.spot is not None else "-"
        rows.append(
            [
                offer.cloud,
                f"{offer.gpu}:{offer.count}",
                offer.machine,
                str(offer.vcpus),
                f"{offer.memory_gib:g}",
                f"{offer.on_demand:.4f}",
                spot,
                offer.region,
            ]
        )
    _table(rows)
    data = catalog.load()
    print(f"\nEstimates as of {data['as_of']}, from:")
    for key, source in data["sources"].items():
        print(f"  {key}: {source['what']} (data dated {source['dated']}, read {source['read']})")
