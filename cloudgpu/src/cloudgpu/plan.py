"""The plan of a cloud run, the same for every cloud: what runs where, at what price, for how
long. tasks/remote_plan.py makes one, summary.py says it in words, and providers/ (one VM) or
jobs/ (a training service's job) turn it into commands."""

from __future__ import annotations

import datetime
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from .catalog import Offer

DISK_GB = 200  # every VM's boot disk (the image, the data cache, the checkpoints)

# Valid as a GCP instance name, an AWS tag, an Azure VM name and a GCP label value: lowercase,
# a letter first, no underscore, no trailing hyphen, 40 characters at most (room for a prefix).
# Checked with fullmatch: `$` would let a trailing newline through.
RUN_ID = re.compile(r"[a-z][a-z0-9-]{0,38}[a-z0-9]")
# vm: one VM this template starts and deletes; managed: the cloud's training service
# (SageMaker, Vertex AI, Azure ML) runs the nodes; skypilot: SkyPilot's managed jobs do.
BACKENDS = ("vm", "managed", "skypilot")
LABEL_PREFIX = "invoke"  # every resource a run makes carries invoke-managed=true and invoke-run


class PlanError(ValueError):
    """A run that must not start: the flag or setting, the value and what it must be."""


def new_run_id(project: str, now: datetime.datetime | None = None) -> str:
    """`<project>-<yymmdd>-<hhmmss>-<4 hex>`, trimmed to the rule of RUN_ID."""
    now = now or datetime.datetime.now(datetime.UTC)
    stem = re.sub(r"[^a-z0-9-]", "-", project.lower()).strip("-")[:18].rstrip("-") or "run"
    if not stem[0].isalpha():
        stem = f"r{stem}"[:18]
    run_id = f"{stem}-{now:%y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    assert RUN_ID.fullmatch(run_id), run_id
    return run_id


def check_run_id(run_id: str, flag: str = "--resume") -> str:
    """`run_id` as given to `flag`, or PlanError naming the flag and the rule."""
    if not RUN_ID.fullmatch(run_id):
        raise PlanError(
            f"{flag} {run_id!r}: a run id is lowercase letters, digits and hyphens, starts "
            "with a letter, 40 characters at most (invoke status lists them)"
        )
    return run_id


@dataclass(frozen=True)
class Plan:
    run_id: str
    cloud: str  # aws, gcp, azure or local
    offer: Offer | None  # None for --cloud=local
    spot: bool
    region: str
    zone: str
    image: str  # registry/repository@sha256:..., never a moving tag
    max_hours: float
    bucket: str  # the run's prefix: <bucket>/<project>/<run id>
    container: list[str]  # what the container runs (the framework's launch, overrides last)
    settings: dict[str, Any]  # the cloud's settings (project, resource group, identity, ...)
    secrets: dict[str, str] = field(default_factory=dict)  # env name -> secret-store name
    created: str = ""  # ISO time, UTC
    user: str = ""
    backend: str = "vm"  # one of BACKENDS
    nodes: int = 1  # machines, each with offer.count GPUs (or none: a CPU machine)
    node_price: float | None = None  # a service's USD/h per node (catalog.job_price), or None
    price_note: str = ""  # what node_price is, and its source
    job_name: str = ""  # the service's name for this submission (a resubmission needs a new one)
    monitor: bool = False  # the VM serves the trainer's metrics and runs the exporters
    attempts: int = 1  # launches it may take: 1 + --retries after preemptions
    worst_node_price: float | None = None  # a job node's highest rate (on-demand), or None
    needs: list[str] = field(default_factory=list)  # a dry run's: what a real run needs first
    launched: str = ""  # ISO time, UTC, of this launch (a relaunch gets --max-hours anew)
    # --cloud=any: the catalog's machine on each cloud it could run on (SkyPilot picks among
    # every cloud it has enabled); `cloud` then holds only the image and the outputs.
    anywhere: tuple[Offer, ...] = ()

    @property
    def cpus_asked(self) -> tuple[int, float]:
        """A CPU run's least vCPUs and GiB: its machine's, or with --cloud=any the least of the
        catalog's machines on each cloud."""
        assert self.offer is not None
        chosen = self.anywhere or (self.offer,)
        return min(o.vcpus for o in chosen), min(o.memory_gib for o in chosen)

    @property
    def secret_names(self) -> str:
        """`NAME=store-name ...`: which secrets the run reads from the cloud's store (never a
        value), for a VM's startup script and a job's environment alike."""
        return " ".join(f"{name}={store}" for name, store in self.secrets.items())

    @property
    def entrypoint(self) -> tuple[list[str], list[str]]:
        """A job node's launcher as SageMaker and Vertex take it: the program, its arguments.

        dumb-init as PID 1 passes the service's SIGTERM on to the trainer, which checkpoints.
        """
        program = self.container[: self.container.index("-m") + 2]  # python -m PACKAGE.launch
        return ["dumb-init", "--", *program], self.container[len(program) :]

    @property
    def job(self) -> str:
        return self.job_name or self.run_id

    @property
    def is_job(self) -> bool:
        """A job of a training service (managed, skypilot), not a VM of ours."""
        return self.backend != "vm"

    @property
    def price(self) -> float | None:
        """USD per hour of all the nodes, estimated from the catalog (0 for --cloud=local)."""
        if not self.offer:
            return 0.0
        each = self.node_price if self.is_job else self.offer.price(self.spot)
        return None if each is None else round(each * self.nodes, 4)

    @property
    def worst_price(self) -> float | None:
        """USD per hour of all the nodes at the most the run can be billed: a spot hour is never
        dearer than an on-demand one (AWS's default spot maximum is the on-demand price, Azure's
        --max-price -1 bills the lower of the two, GCP's Spot prices sit below on-demand)."""
        if not self.offer:
            return 0.0
        each = self.worst_node_price if self.is_job else self.offer.on_demand
        return None if each is None else round(each * self.nodes, 4)

    @property
    def cost_cap(self) -> float | None:
        """The most the run's machines can cost: the worst rate for --max-hours, once for every
        launch --retries allows (each relaunch runs up to --max-hours again)."""
        worst = self.worst_price
        return None if worst is None else round(worst * self.max_hours * self.attempts, 2)

    @property
    def deadline_time(self) -> datetime.datetime:
        """When this launch's machine must be gone: --max-hours after it was asked for."""
        start = datetime.datetime.fromisoformat(self.launched or self.created)
        return start + datetime.timedelta(hours=self.max_hours)

    @property
    def deadline(self) -> str:
        return self.deadline_time.isoformat(timespec="seconds")

    @property
    def labels(self) -> dict[str, str]:
        """On every resource the run makes: who, what, until when (valid on all three clouds)."""
        return {
            f"{LABEL_PREFIX}-managed": "true",
            f"{LABEL_PREFIX}-run": self.run_id,
            f"{LABEL_PREFIX}-project": label_value(self.settings["project_name"]),
            f"{LABEL_PREFIX}-creator": label_value(self.user) or "unknown",
            f"{LABEL_PREFIX}-deadline": f"{self.deadline_time:%Y%m%d-%H%M%S}z",  # UTC
        }


def check_nodes(backend: str, nodes: str | int) -> int:
    if backend not in BACKENDS:
        raise PlanError(f"--backend {backend!r}: choose one of {', '.join(BACKENDS)}")
    try:
        count = int(nodes)
    except ValueError:
        raise PlanError(f"--nodes {nodes!r} is not a whole number; e.g. --nodes 2") from None
    if not 1 <= count <= 64:
        raise PlanError(f"--nodes {nodes}: give 1 to 64 machines")
    if count > 1 and backend == "vm":
        raise PlanError(
            f"--nodes {count}: one VM per run with --backend=vm; several nodes run as a job of "
            "the cloud's training service: add --backend=managed (or --backend=skypilot)"
        )
    return count


def label_value(text: str) -> str:
    """`text` as a label value every cloud accepts: lowercase letters, digits, hyphens."""
    return re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")[:63]


def check_max_hours(value: str | float) -> float:
    try:
        hours = float(value)
    except ValueError:
        raise PlanError(
            f"--max-hours {value!r} is not a number of hours; e.g. --max-hours 4"
        ) from None
    if not 0 < hours <= 168:
        raise PlanError(f"--max-hours {value}: give more than 0 and at most 168 hours (a week)")
    return hours
