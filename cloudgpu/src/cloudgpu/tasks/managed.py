"""Jobs of the clouds' training services, for the cloud tasks (remote_run.py, remote.py): submit
the plan's job, follow it to its end, and its state, for status, logs and stop.

`invoke train --cloud=aws --backend=managed --nodes 4 --gpu a10g:4` makes the same plan as a VM
run (catalog, price, image by digest, bucket, secrets); cloudgpu/jobs/engines.py picks the service's
module, which writes the job's file, kept beside the run's record, and sends it with the cloud's
CLI.
"""

from __future__ import annotations

import sys
from typing import Any

from cloudgpu import runs
from cloudgpu.commands import CloudError, Commands
from cloudgpu.jobs import common
from cloudgpu.jobs.engines import engine as engine_of
from cloudgpu.plan import Plan

from .project import framework

FOLLOW_SECONDS = 30


def write_spec(plan: Plan, cmd: Commands) -> str:
    """The job's file for the plan, written beside its record (printed in a dry run)."""
    engine = engine_of(plan.backend, plan.cloud)
    document = engine.spec(plan, common.environment(plan), framework.azureml_distribution, cmd)
    text = common.as_json(document) if engine.FORMAT == "json" else common.as_yaml(document)
    path = common.write_spec(plan, engine.SPEC, text)
    if cmd.dry_run:
        print(f"--- {engine.SPEC} ---\n{text.rstrip()}\n--- end of {engine.SPEC} ---")
    return str(path)


def submit(plan: Plan, cmd: Commands) -> dict[str, Any]:
    """Write the job's file and send it; the ids the service gave it."""
    engine = engine_of(plan.backend, plan.cloud)
    path = write_spec(plan, cmd)
    return {"backend": plan.backend, "nodes": plan.nodes, **engine.submit(plan, path, cmd)}


def describe(record: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    engine = engine_of(record["backend"], record["cloud"])
    return dict(engine.describe(settings, record, Commands(verbose=False)))


def cancel(record: dict[str, Any], settings: dict[str, Any], cmd: Commands) -> None:
    engine_of(record["backend"], record["cloud"]).cancel(settings, record, cmd)


def ended(record: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any] | None:
    """The job's state once it has ended, else None (it still runs)."""
    state = describe(record, settings)
    if state["state"] not in common.ENDED:
        return None
    if state.get("failure"):
        print(f"{record['job']}: {state['failure']}", file=sys.stderr)
    return state


def status_row(record: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """A job's row of `invoke status`: what the service says of it now."""
    state: dict[str, Any] = {}
    if not record.get("job"):  # saved before the submission, which never answered
        shown = "not submitted"
    else:
        try:
            state = describe(record, settings)
            shown = state["state"] + (f" ({state['detail']})" if state.get("detail") else "")
        except CloudError as error:
            shown = f"? ({error})"
    nodes = state.get("nodes") or record.get("nodes", 1)
    hours = (state.get("billable_s") or 0) / 3600 if state.get("billable_s") is not None else None
    uptime = runs.uptime_hours(record)
    price = record.get("price") or 0.0
    # SageMaker says the seconds it bills per node; the others, a bound from the uptime.
    cost = f"${hours * price:.2f} billed" if hours is not None else f"${uptime * price:.2f} at most"
    return [
        record["run"],
        f"{'any' if record.get('anywhere') else record['cloud']} {record['backend']}",
        f"{nodes} x {record.get('gpu', '?')}",
        shown,
        f"{uptime:.2f} h",
        cost,
        record.get("deadline", ""),
    ]
