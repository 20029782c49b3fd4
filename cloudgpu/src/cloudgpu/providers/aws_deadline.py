"""The cloud's own cap on an AWS VM: a one-time EventBridge Scheduler schedule that terminates the
instance at its deadline, even if the VM's script never runs (a hung pull, a driver that never
comes up, a reboot). The VM's own watchdog deletes it a minute before; the schedule deletes itself
once it has fired, and `invoke stop` deletes it with the VM.

Facts: EventBridge Scheduler's universal targets call any API as
arn:aws:scheduler:::aws-sdk:SERVICE:apiAction with Input, the request as JSON (the Scheduler
user guide, managing-targets-universal).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..commands import CloudError, Commands
from ..plan import Plan, label_value
from . import aws_account, aws_policies
from .aws_account import account, aws_cli

TERMINATE = "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances"
ROLE_TRIES = 6  # a new role takes seconds to reach EventBridge Scheduler: tries, 5 s apart


def role_name(settings: dict[str, Any]) -> str:
    return f"{settings['project_name']}-deadline"


def ensure_role(settings: dict[str, Any], cmd: Commands) -> None:
    """The role the schedules run as (made on first use, its policy written at every launch):
    it may terminate the project's labelled instances and nothing else."""
    owner = account(settings, cmd)
    trust = aws_policies.trust("scheduler.amazonaws.com", owner)
    policy = aws_policies.deadline(settings, owner, label_value(settings["project_name"]))
    aws_account.ensure_role(settings, role_name(settings), trust, policy, cmd)


def schedule(plan: Plan, instance: str, cmd: Commands) -> None:
    """Terminate `instance` at the plan's deadline. CloudError when it cannot be scheduled: the
    caller terminates the instance rather than leave it without a cap."""
    settings = plan.settings
    role = f"arn:aws:iam::{account(settings, cmd)}:role/{role_name(settings)}"
    target = {"Arn": TERMINATE, "RoleArn": role, "Input": json.dumps({"InstanceIds": [instance]})}
    command = aws_cli(
        settings, "scheduler", "create-schedule", "--name", instance,
        "--schedule-expression", f"at({plan.deadline_time:%Y-%m-%dT%H:%M:%S})",
        "--schedule-expression-timezone", "UTC", "--flexible-time-window", "Mode=OFF",
        "--action-after-completion", "DELETE", "--target", json.dumps(target),
        "--description", f"run {plan.run_id}: terminate its VM at its deadline",
    )  # fmt: skip
    for attempt in range(ROLE_TRIES):
        try:
            cmd.run(command)
            return
        except CloudError as error:
            if "assume" not in str(error) or attempt == ROLE_TRIES - 1:
                raise
            time.sleep(5)


def unschedule(settings: dict[str, Any], instance: str, cmd: Commands) -> None:
    """Delete the instance's schedule (gone already when it has fired)."""
    cmd.run(
        aws_cli(settings, "scheduler", "delete-schedule", "--name", instance, output=""),
        check=False,
        quiet=True,
    )
