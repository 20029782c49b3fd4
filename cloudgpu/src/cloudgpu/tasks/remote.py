"""The cloud runs started from here: `invoke status`, `logs` and `stop`. Starting one
(`invoke train --cloud=...`) is remote_plan.py and remote_run.py; the work itself is in the
cloudgpu package (a plan, then each cloud's own CLI). What can be started is offers.py's.
"""

from __future__ import annotations

import datetime
import functools
import json
import shutil
from pathlib import Path
from typing import Any

from invoke import Context, Exit, task

from cloudgpu import CLIS, PROVIDERS, runs, settings
from cloudgpu.commands import CloudError, Commands
from cloudgpu.jobs.common import ENDED
from cloudgpu.plan import PlanError, check_run_id

from . import managed
from .project import DEFAULT_CLOUD, IMAGE
from .remote_plan import fail, install_hint, utc_now
from .remote_run import FOLLOW_SECONDS, print_log


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
        raise fail(error) from None


def _record(run_id: str) -> dict[str, Any]:
    record = runs.load(_run_id(run_id))
    if record is None:
        raise Exit(f"error: --run {run_id}: no such run here (invoke status lists them)", 2)
    return record


def run_here(run: str, dry_run: bool = False) -> str:
    """RUN as given where it is a path here; a cloud run's id: its run folder, copied from the
    bucket into outputs/cloud/<id>/run (what changed since the last copy; a dry run says so)."""
    if Path(run).exists():
        return run
    try:
        run_id = check_run_id(run, "--run")
    except PlanError:
        raise Exit(f"error: --run {run}: no such run folder or checkpoint here", 2) from None
    record = runs.load(run_id)
    if record is None:
        raise Exit(f"error: --run {run}: no such run folder, checkpoint or cloud run started "
                   "here (invoke status lists them)", 2)  # fmt: skip
    here = runs.folder(run_id) / "run"
    options = settings.load(record["cloud"], IMAGE)
    print(f"copying run {run_id}'s folder from {record['bucket']}/outputs/run to {here}")
    try:
        PROVIDERS[record["cloud"]].copy_down(f"{record['bucket']}/outputs/run", str(here),
                                             options, Commands(dry_run=dry_run))  # fmt: skip
    except CloudError as error:
        raise Exit(f"error: {error}", 1) from None
    return str(here)


@task(
    help={
        "run": "one run's details (default: every run, with its state and cost so far)",
        "cloud": "ask only this cloud: aws, gcp, azure or local",
    }
)
def status(c: Context, run: str = "", cloud: str = "") -> None:
    """The cloud runs: cloud, GPU, state, uptime, cost so far, deadline; past ones flagged."""
    now = utc_now()
    rows: list[list[str]] = []
    seen: set[str] = set()
    if run:
        _run_id(run)
    asked = _clouds(cloud)
    others = [name for name in PROVIDERS if name not in asked and name != "local"]
    print(f"clouds asked: {', '.join(asked)}" + (
        f" (those with runs here, and the default; --cloud {'|'.join(others)} asks another)"
        if others and not cloud else ""))  # fmt: skip
    for name in asked:
        if shutil.which(CLIS[name]) is None:
            print(f"{name}: not asked, {CLIS[name]} is not installed ({install_hint(name)})")
            continue
        try:
            found_runs = PROVIDERS[name].runs(settings.load(name, IMAGE), Commands(verbose=False))
        except CloudError as error:
            if cloud:  # asked for by name: its error is the answer
                raise fail(error) from None
            print(f"{name}: not asked: {error}")
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
    if run and not rows:
        raise Exit(f"error: --run {run}: no such run here or on {', '.join(asked)}", 2)
    header = ["RUN", "CLOUD", "GPU", "STATE", "UPTIME", "COST SO FAR", "DEADLINE"]
    table([header, *rows]) if rows else print("no cloud runs")


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


def table(rows: list[list[str]]) -> None:
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
            raise fail(error) from None
        return state if state in ENDED else ""
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
    record = runs.load(_run_id(run)) or _labelled(run)
    options = settings.load(record["cloud"], IMAGE)
    cmd = Commands(dry_run=dry_run)
    job = record.get("backend", "vm") != "vm"
    try:
        if job:
            managed.cancel(record, options, cmd)
        else:
            PROVIDERS[record["cloud"]].delete(options, record, cmd)
    except CloudError as error:
        raise fail(error) from None
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


def _labelled(run: str) -> dict[str, Any]:
    """A run this machine has no record of, found on the clouds by its labels: a machine (or
    group) labelled invoke-managed and invoke-run=RUN. Only such a one is ever stopped: a name
    alone may be anyone's machine. These lookups only read, in a dry run too."""
    looked = []
    for cloud in _clouds(""):
        if cloud == "local" or shutil.which(CLIS[cloud]) is None:
            continue
        looked.append(cloud)
        try:
            found = PROVIDERS[cloud].runs(settings.load(cloud, IMAGE), Commands(verbose=False))
        except CloudError as error:
            raise fail(error) from None
        for entry in found:
            if entry.get("run") == run:
                return {**entry, "cloud": cloud}
    where = f" or on {', '.join(looked)}" if looked else ""
    raise Exit(
        f"error: --run {run}: no run of this project by that id here{where} (invoke stop stops "
        "only what carries its invoke-managed and invoke-run labels); invoke status lists them",
        2,
    )
