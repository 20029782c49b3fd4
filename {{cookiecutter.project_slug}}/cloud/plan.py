"""The plan of a cloud run, the same for every cloud: what runs where, at what price, for how
long. tasks/cloud.py makes one; aws.py, gcp.py, azure.py and local.py turn it into commands."""

from __future__ import annotations

import datetime
import re
import secrets
import shlex
from dataclasses import dataclass, field
from typing import Any

from .catalog import Offer

# Valid as a GCP instance name, an AWS tag, an Azure VM name and a GCP label value: lowercase,
# a letter first, no underscore, no trailing hyphen, 40 characters at most (room for a prefix).
RUN_ID = re.compile(r"^[a-z][a-z0-9-]{0,38}[a-z0-9]$")
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
    assert RUN_ID.match(run_id), run_id
    return run_id


def check_run_id(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise PlanError(
            f"--resume {run_id!r}: a run id is lowercase letters, digits and hyphens, starts "
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

    @property
    def price(self) -> float | None:
        """USD per hour, estimated from the catalog (None for --cloud=local)."""
        return self.offer.price(self.spot) if self.offer else 0.0

    @property
    def cost_cap(self) -> float | None:
        return None if self.price is None else round(self.price * self.max_hours, 2)

    @property
    def deadline_time(self) -> datetime.datetime:
        start = datetime.datetime.fromisoformat(self.created)
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
            f"{LABEL_PREFIX}-project": _label(self.settings["project_name"]),
            f"{LABEL_PREFIX}-creator": _label(self.user) or "unknown",
            f"{LABEL_PREFIX}-deadline": f"{self.deadline_time:%Y%m%d-%H%M%S}z",  # UTC
        }

    def summary(self) -> list[tuple[str, str]]:
        """What a person checks before paying: the table `invoke train --cloud` shows."""
        offer = self.offer
        rows = [("run", self.run_id), ("cloud", f"{self.cloud} {self.region} {self.zone}".strip())]
        if offer is not None:
            rows += [
                ("machine", f"{offer.machine} ({offer.vcpus} vCPUs, {offer.memory_gib} GiB)"),
                ("GPU", f"{offer.count} x {offer.gpu}" + (", spot" if self.spot else "")),
                (
                    "price",
                    f"${self.price:.3f}/h, estimated ({offer.source})"
                    if self.price is not None
                    else "unknown: the catalog has no spot price",
                ),
                (
                    "cost cap",
                    f"${self.cost_cap:.2f} (--max-hours {self.max_hours:g})"
                    if self.cost_cap is not None
                    else f"--max-hours {self.max_hours:g}",
                ),
            ]
        rows += [
            ("image", self.image),
            ("outputs", self.bucket),
            ("deadline", f"{self.deadline} (the machine deletes itself by then)"),
            ("command", shlex.join(self.container)),
        ]
        return rows


def _label(text: str) -> str:
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
