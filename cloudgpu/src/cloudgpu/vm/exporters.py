"""The exporters a monitored VM runs beside the training container (exporters.json): node_exporter
for the VM, dcgm-exporter for its GPUs, each by digest; `invoke monitor --pin-exporters` records
the digests, `invoke train --cloud=... --monitor` starts them (startup.sh), `invoke monitor --run
ID` scrapes them through the cloud's tunnel (tunnels.py)."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from ..commands import CloudError, Commands
from ..plan import PlanError
from ..project import ROOT

# The project's monitoring/exporters.json (its pins are the project's); CLOUD_EXPORTERS names
# another file (a test's).
EXPORTERS = Path(os.environ.get("CLOUD_EXPORTERS") or ROOT / "monitoring" / "exporters.json")


def load() -> dict[str, Any]:
    return dict(json.loads(EXPORTERS.read_text(encoding="utf-8")))


def trainer_port() -> int:
    return int(load()["trainer_port"])


def wanted(gpus: int) -> dict[str, dict[str, Any]]:
    """The exporters of a VM with `gpus` GPUs: node_exporter, and dcgm-exporter where gpus > 0."""
    return {
        name: spec for name, spec in load()["exporters"].items() if gpus > 0 or not spec["gpu_only"]
    }


def check_pinned(gpus: int) -> None:
    """PlanError naming every exporter --monitor needs that has no digest yet."""
    missing = [f"{s['image']}:{s['tag']}" for s in wanted(gpus).values() if not s["digest"]]
    if missing:
        raise PlanError(
            f"--monitor: {EXPORTERS.name} has no digest for {', '.join(missing)}: pin them with "
            "invoke monitor --pin-exporters (it pulls each tag and records its digest)"
        )


def docker_runs(run_id: str, gpus: int, bind: str) -> list[str]:
    """Each exporter's `docker run` arguments (after `docker run --detach`), one line each, for
    startup.sh; they listen on `bind` (loopback, or the VM's address for IAP and Bastion)."""
    lines = []
    for name, spec in wanted(gpus).items():
        args = [arg.format(bind=bind, port=spec["port"]) for arg in spec["args"]]
        reference = f"{spec['image']}@{spec['digest']}"
        name_flag = f"--name={name}-exporter-{run_id}"
        lines.append(shlex.join([name_flag, *spec["docker"], reference, *args]))
    return lines


def ports(gpus: int) -> dict[str, int]:
    """What a monitored VM serves: the trainer's /metrics and each exporter's, by name."""
    return {"trainer": trainer_port(), **{name: s["port"] for name, s in wanted(gpus).items()}}


def pin(docker: str, cmd: Commands) -> dict[str, str]:
    """Pull every exporter's tag and write the digest it points to into exporters.json."""
    data = load()
    pinned = {}
    for name, spec in data["exporters"].items():
        tagged = f"{spec['image']}:{spec['tag']}"
        cmd.run([docker, "pull", "--quiet", tagged])
        done = cmd.run(
            [docker, "image", "inspect", tagged],
            dry_answer=json.dumps([{"RepoDigests": [f"{spec['image']}@sha256:<digest>"]}]),
        )
        listed = json.loads(done.stdout or "[{}]")[0].get("RepoDigests") or []
        digests = [d for d in listed if d.startswith(spec["image"] + "@")]
        if not digests:
            raise CloudError(f"{tagged}: the engine knows no registry digest for it")
        spec["digest"] = digests[0].split("@", 1)[1]
        pinned[name] = f"{spec['image']}@{spec['digest']}"
    if not cmd.dry_run:
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        EXPORTERS.write_text(text, encoding="utf-8")
    return pinned
