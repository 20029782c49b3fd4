"""--cloud=local: the very launch path of the clouds, on this machine's Docker engine. The image
goes through a registry when cloud.toml's [local] names one (else it runs by its image id), the
outputs to a folder or an s3:// bucket, and startup.sh runs here instead of on a VM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from ..commands import CloudError, Commands
from ..plan import Plan
from ..project import ROOT
from ..runs import RUNS, folder


def ensure_repository(settings: dict[str, Any], cmd: Commands) -> str:
    return (
        f"{settings['registry'].rstrip('/')}/{settings['project_name']}"
        if settings["registry"]
        else ""
    )


def lasting(plan_bucket: str, settings: dict[str, Any], backend: str = "vm") -> list[str]:
    """Nothing on a cloud: the outputs stay in a folder (or the bucket) you named."""
    del plan_bucket, settings, backend
    return []


def own_registry(host: str, settings: dict[str, Any]) -> bool:
    """A local registry needs no login: nothing is sent to any."""
    return False


def docker_login(settings: dict[str, Any], cmd: Commands, docker: str) -> None:
    """A local registry takes pushes without a login."""


def ensure_bucket(settings: dict[str, Any], cmd: Commands) -> str:
    bucket = settings["bucket"] or str(RUNS)
    if "://" not in bucket:
        bucket = str((ROOT / bucket).resolve())
    return bucket.rstrip("/")


def environment(plan: Plan) -> dict[str, str]:
    return {
        **os.environ,
        "WORK": str(folder(plan.run_id) / "work"),
        "DOCKER": os.environ.get("DOCKER", "docker"),
    }


def launch(plan: Plan, script: str, cmd: Commands, detach: bool = False) -> dict[str, Any]:
    """Run startup.sh here: in the foreground (Ctrl-C stops the run, with its teardown), or
    detached in a session of its own, logging to outputs/cloud/<run>/startup.log."""
    command = ["bash", script]
    if cmd.dry_run:
        cmd.run(command)
        return {}
    log = folder(plan.run_id) / "startup.log"
    if detach:
        with log.open("ab") as out:
            process = subprocess.Popen(
                command,
                env=environment(plan),
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return {"pid": process.pid, "log": str(log)}
    process = subprocess.Popen(command, env=environment(plan), start_new_session=True)
    try:
        code = process.wait()
    except KeyboardInterrupt:  # Ctrl-C: the script stops the container, syncs and tears down
        process.send_signal(signal.SIGINT)
        code = process.wait()
    return {"pid": process.pid, "exit_code": code}


def command_line(pid: int) -> str:
    """What process `pid` runs, as its arguments joined by spaces ("" when it is gone)."""
    proc = Path(f"/proc/{pid}/cmdline")
    if proc.parent.is_dir():  # Linux
        try:
            return proc.read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return ""
    done = subprocess.run(["ps", "-o", "args=", "-p", str(pid)], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def alive(pid: int | None, run_id: str) -> bool:
    """Whether `pid` is still the run's startup.sh. A PID is reused once its process ends: one
    that now runs anything else is not the run, and is never signalled."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return command_line(pid).endswith(str(folder(run_id) / "startup.sh"))


def runs(settings: dict[str, Any], cmd: Commands) -> list[dict[str, Any]]:
    found = []
    for path in sorted(RUNS.glob("*/run.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("cloud") == "local" and alive(record.get("pid"), record["run"]):
            found.append(
                {
                    "run": record["run"],
                    "id": str(record["pid"]),
                    "state": "running",
                    "deadline": record.get("deadline", ""),
                }
            )
    return found


def delete(settings: dict[str, Any], record: dict[str, Any], cmd: Commands) -> None:
    """SIGTERM to the run's startup.sh: it stops the container with a checkpoint and tears down."""
    pid = int(record.get("pid") or record.get("id") or 0)
    if not alive(pid, record.get("run", "")):
        raise CloudError(f"run {record.get('run')} is not running here")
    os.killpg(pid, signal.SIGTERM)


def read_text(uri: str, settings: dict[str, Any], cmd: Commands) -> str | None:
    if uri.startswith("s3://"):
        done = cmd.run(["aws", "s3", "cp", uri, "-"], check=False, quiet=True)
        return done.stdout if done.returncode == 0 else None
    path = Path(uri)
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def copy_up(local: str, uri: str, settings: dict[str, Any], cmd: Commands) -> None:
    """A file, or a folder's files, to the bucket (an s3:// URI, or a folder here)."""
    folder = Path(local).is_dir()
    if uri.startswith("s3://"):
        cmd.run(["aws", "s3", "sync" if folder else "cp", "--only-show-errors", local, uri])
    else:
        cmd.run(["mkdir", "-p", uri if folder else str(Path(uri).parent)])
        cmd.run(["cp", "-a", f"{local}/." if folder else local, uri])


def copy_down(uri: str, local: str, settings: dict[str, Any], cmd: Commands) -> None:
    """A folder of the bucket (an s3:// URI, or a folder here), here."""
    if uri.startswith("s3://"):
        cmd.run(["aws", "s3", "sync", "--only-show-errors", uri, local])
    else:
        cmd.run(["mkdir", "-p", local])
        cmd.run(["cp", "-a", f"{uri}/.", local])
