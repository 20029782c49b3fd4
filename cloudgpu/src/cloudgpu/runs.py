"""What this machine remembers of the cloud runs it started: outputs/cloud/<run id>/run.json.

The clouds know their runs too (the labels every resource carries): `invoke status` lists both,
so a run started elsewhere, or whose record is gone, still shows, and can still be stopped.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

from .plan import Plan
from .project import ROOT

# outputs/cloud/ of the project; CLOUD_RUNS names another folder.
RUNS = Path(os.environ.get("CLOUD_RUNS") or ROOT / "outputs" / "cloud")


def folder(run_id: str) -> Path:
    return RUNS / run_id


def save(plan: Plan, ids: dict[str, Any]) -> Path:
    """Record a launched run: its plan's facts and the cloud's ids for it."""
    record = {
        "run": plan.run_id,
        "cloud": plan.cloud,
        "region": plan.region,
        "zone": plan.zone,
        "machine": plan.offer.machine if plan.offer else "local",
        "gpu": _machine_words(plan),
        "spot": plan.spot,
        "price": plan.price,
        "image": plan.image,
        "bucket": plan.bucket,
        "created": plan.created,
        "deadline": plan.deadline,
        "container": plan.container,
        "monitor": plan.monitor,
        "gpus": plan.offer.count if plan.offer else 0,
        **({"anywhere": True} if plan.anywhere else {}),  # --cloud=any: `cloud` is the home
        **ids,
    }
    path = folder(plan.run_id) / "run.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def load(run_id: str) -> dict[str, Any] | None:
    path = folder(run_id) / "run.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def all_records() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(RUNS.glob("*/run.json"))]


def update(run_id: str, **fields: Any) -> None:
    record = load(run_id)
    if record is not None:
        (folder(run_id) / "run.json").write_text(json.dumps(record | fields, indent=2) + "\n")


def uptime_hours(record: dict[str, Any], now: datetime.datetime | None = None) -> float:
    now = now or datetime.datetime.now(datetime.UTC)
    started = datetime.datetime.fromisoformat(record["created"])
    return max(0.0, (now - started).total_seconds() / 3600)


def past_deadline(record: dict[str, Any], now: datetime.datetime | None = None) -> bool:
    now = now or datetime.datetime.now(datetime.UTC)
    return bool(record.get("deadline")) and now > datetime.datetime.fromisoformat(
        record["deadline"]
    )


def _machine_words(plan: Plan) -> str:
    """What `invoke status` shows in its GPU column: `1 x t4`, or a CPU machine's vCPUs."""
    if plan.offer is None:
        return "-"
    if plan.offer.is_cpu and plan.anywhere:
        return f"{plan.cpus_asked[0]}+ vCPUs"
    if plan.offer.is_cpu:
        return f"{plan.offer.vcpus} vCPUs ({plan.offer.machine})"
    return f"{plan.offer.count} x {plan.offer.gpu}"
