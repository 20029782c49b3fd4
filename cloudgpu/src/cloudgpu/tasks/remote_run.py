"""A planned cloud run started and followed: its startup script written and its VM started
(the region's other zones tried when one has no capacity), or its job submitted to the service;
its log printed from the bucket as it grows; relaunched after a preemption, up to --retries."""

from __future__ import annotations

import dataclasses
import functools
import json
import secrets
import sys
import time
from collections.abc import Callable
from typing import Any

from invoke import Context, Exit

from cloudgpu import PROVIDERS, catalog, runs
from cloudgpu.commands import Capacity, CloudError, Commands
from cloudgpu.plan import Plan, PlanError
from cloudgpu.vm import startup

from . import managed, profiling
from .remote_plan import GOING, confirm, fail, machine_up, plan_run, show, unsent_secrets, utc_now

FOLLOW_SECONDS = 10
# While following, whether the machine still exists is asked every this many polls, and not
# before it can have been listed (a cloud lists a new machine within seconds to a minute).
MACHINE_CHECK_POLLS, MACHINE_LISTED_AFTER = 6, 120
# A run's log in its bucket, under outputs/: the trainer's own, uploaded as the run goes (a job's
# service keeps it too), and a VM's container's whole output, tracebacks too, uploaded at its end.
TRAINER_LOG, CONTAINER_LOG = "run/train.log", "logs/train.log"


def launch(plan: Plan, cmd: Commands, detach: bool) -> dict[str, Any]:
    """Write the startup script and start the machine, trying the region's other zones when
    one has no capacity. Each launch has --max-hours from now: its deadline."""
    plan = dataclasses.replace(plan, launched=utc_now().isoformat())
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
        f"{'dropping --spot, ' if plan.spot else ''}or a smaller machine (invoke machines)"
    )


def _registry_host(plan: Plan) -> str:
    """The registry the VM logs in to with the cloud's credentials: the image's, if it is the
    cloud's own (ECR, Artifact Registry, the project's ACR); another's (ghcr.io, Docker Hub)
    is pulled without them, never handed the cloud's token."""
    host = plan.image.split("/", 1)[0] if "/" in plan.image else ""
    return host if host and PROVIDERS[plan.cloud].own_registry(host, plan.settings) else ""


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
    """Print the run's log from the bucket as it grows; its status.json once it has ended, or,
    when the machine is gone without one, why it most likely went (vanished())."""
    provider, options = PROVIDERS[plan.cloud], plan.settings
    polls = 0

    def status() -> dict[str, Any] | None:
        nonlocal polls
        polls += 1
        text = provider.read_text(f"{plan.bucket}/outputs/status.json", options, cmd)
        if text:
            return dict(json.loads(text))
        if polls % MACHINE_CHECK_POLLS or polls * FOLLOW_SECONDS < MACHINE_LISTED_AFTER:
            return None
        gone = vanished(plan, provider, cmd)
        if gone is None:
            return None
        text = provider.read_text(f"{plan.bucket}/outputs/status.json", options, cmd)
        return dict(json.loads(text)) if text else gone  # its last upload may have come late

    return dict(print_log(plan.bucket, provider, options, status, FOLLOW_SECONDS))


def vanished(plan: Plan, provider: Any, cmd: Commands) -> dict[str, Any] | None:
    """None while the run's machine is listed and not going; else the status of a run that left
    none: past its deadline, the cloud's cap took it; a spot machine was reclaimed (within its
    notice, so no checkpoint was sent after the last upload); else it was lost. The run's last
    uploaded checkpoint is in the bucket either way."""
    try:
        listed = provider.runs(plan.settings, cmd)
    except CloudError:  # the cloud did not answer: ask again at the next check
        return None
    # A stopped machine (AWS's, stopped by hand) runs no more either, though it could restart.
    if machine_up(listed, plan.run_id, GOING | {"stopped"}):
        return None
    detail = "the machine is gone and left no status.json"
    if utc_now() >= plan.deadline_time:
        return {"reason": "timeout", "detail": detail}
    return {"reason": "preempted" if plan.spot else "lost", "detail": detail}


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
    cpus: str = "",
    memory: str = "",
    machine: str = "",
) -> None:
    """The whole of `invoke train --cloud=...`."""
    cmd = Commands(dry_run=dry_run)
    try:
        plan = plan_run(
            c, cloud, gpu, spot, region, zone, image_ref, max_hours, resume, overrides, cmd,
            backend, nodes, monitor, cpus, memory, machine,
        )  # fmt: skip
        plan = dataclasses.replace(plan, attempts=retries + 1)  # the cap counts every launch
        known = None if plan.anywhere else plan.offer  # --cloud=any: SkyPilot's, not known yet
        show(plan, cmd, profiling.plan_line(known, plan.nodes, plan.spot, overrides))
        for warning in unsent_secrets(plan, overrides):
            print(f"warning: {warning}", file=sys.stderr)
        if not plan.is_job:  # a VM's quota; the services check their own when they schedule
            problem = getattr(PROVIDERS[cloud], "quota_problem", lambda *_: None)(plan, cmd)
            if problem:
                raise CloudError(problem)
        if not dry_run:
            confirm(plan, yes)
        if plan.is_job:
            run_job(plan, cmd, detach, retries)
            if dry_run:
                dry_run_done(plan)
            return
        for attempt in range(retries + 1):
            if not dry_run:
                runs.save(plan, {})  # before the machine starts: a run is never unrecorded
            ids = launch(plan, cmd, detach)
            if dry_run:
                dry_run_done(plan)
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
        raise fail(error) from None


def dry_run_done(plan: Plan) -> None:
    """A dry run's last lines: that nothing started, where its files are, what a real run needs."""
    print(f"dry run: nothing started or made; its files are in {runs.folder(plan.run_id)}")
    if plan.needs:
        print("before a real run:")
        for need in plan.needs:
            print(f"  - {need}")


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
