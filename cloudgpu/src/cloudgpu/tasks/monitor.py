"""Watch runs live on this machine: `invoke monitor` starts Prometheus, a Pushgateway and
node_exporter on loopback, with a Prometheus config (written to outputs/monitor/) that scrapes
every run training with `monitoring=prometheus` and evaluates monitoring/alerts.yml; Ctrl-C stops
all three. It installs nothing: a missing binary is named with the command that installs it.

`invoke monitor --run ID` also watches a cloud run started with --monitor: the cloud's tunnel
(cloudgpu/vm/tunnels.py) brings its trainer's, node_exporter's and dcgm-exporter's ports here, and
Prometheus scrapes them with the label cloud_run=ID. `--pin-exporters` records the digests of the
exporters a monitored VM runs (monitoring/exporters.json).

Grafana is not started here: monitoring/grafana/ holds the provisioning (data source, dashboard)
for a Grafana you run (cloudgpu docs/monitoring.md: Watch a run live).
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from invoke import Context, Exit, task

from cloudgpu.project import ROOT

from .args import duration
from .args import port as port_number
from .project import PACKAGE

# Each program, the names its binary goes by, and its Debian and Ubuntu package.
PROGRAMS = {
    "prometheus": (("prometheus",), "prometheus"),
    "pushgateway": (("prometheus-pushgateway", "pushgateway"), "prometheus-pushgateway"),
    "node_exporter": (("prometheus-node-exporter", "node_exporter"), "prometheus-node-exporter"),
}
DOWNLOADS = "https://prometheus.io/download/"  # the binaries, for other systems


@task(
    help={
        "port": "Prometheus's port (default 9090)",
        "pushgateway_port": "the Pushgateway's port (default 9091)",
        "node_port": "node_exporter's port (default 9100)",
        "scrape_interval": "how often Prometheus scrapes, as Prometheus writes it (default 5s)",
        "folder": "where the config, the data and the logs go (default outputs/monitor)",
        "dry_run": "print the config and the commands instead of starting anything",
        "run": "also watch this cloud run (started with --monitor), through the cloud's tunnel",
        "pin_exporters": "pull the exporters' tags and record their digests in "
        "monitoring/exporters.json, then stop",
    }
)
def monitor(
    c: Context,
    port: str = "9090",
    pushgateway_port: str = "9091",
    node_port: str = "9100",
    scrape_interval: str = "5s",
    folder: str = "outputs/monitor",
    dry_run: bool = False,
    run: str = "",
    pin_exporters: bool = False,
) -> None:
    """Watch runs live: Prometheus, a Pushgateway and node_exporter here (--run ID: a cloud's).

    They listen on 127.0.0.1 and scrape the runs of this machine; with --run ID also a cloud
    run's metrics, through the cloud's tunnel."""
    if pin_exporters:
        _pin(dry_run)
        return
    ports = {
        "prometheus": port_number("--port", port),
        "pushgateway": port_number("--pushgateway-port", pushgateway_port),
        "node_exporter": port_number("--node-port", node_port),
    }
    if len(set(ports.values())) < len(ports):
        raise Exit(f"error: the three ports must differ, got {sorted(ports.values())}", code=2)
    interval = duration("--scrape-interval", scrape_interval)
    home = (ROOT / folder).resolve()
    tunnels, cloud_targets = _cloud_run(run) if run else ([], [])  # a bad --run: one line
    binaries, missing = _find_binaries()
    if missing and not dry_run:
        raise Exit(
            f"error: not found on PATH: {'; '.join(missing)}; other systems: {DOWNLOADS}", code=1
        )
    config = prometheus_config(home, ports, scrape_interval, interval)
    commands = _commands(binaries, home, ports)
    if dry_run:
        for program in missing:  # a dry run shows the plan all the same
            print(f"# not found on PATH: {program}")
        print(f"# {home / 'prometheus.yml'}\n{config}")
        for command in [*(t.argv for t in tunnels if t.argv), *commands.values()]:
            print(shlex.join(command))
        if cloud_targets:
            print(f"# {home / 'targets' / f'cloud-{run}.json'}\n{json.dumps(cloud_targets)}")
        return
    (home / "targets").mkdir(parents=True, exist_ok=True)
    (home / "logs").mkdir(exist_ok=True)
    (home / "prometheus.yml").write_text(config, encoding="utf-8")
    target_file = home / "targets" / f"cloud-{run}.json"
    opened = {f"tunnel-{t.source}": t.argv for t in tunnels if t.argv}
    try:
        if cloud_targets:
            target_file.write_text(json.dumps(cloud_targets), encoding="utf-8")
            for tunnel in tunnels:
                print(f"{run} {tunnel.source:<8} port {tunnel.remote_port} -> "
                      f"127.0.0.1:{tunnel.local_port}")  # fmt: skip
        _serve({**opened, **commands}, home, ports)
    finally:
        target_file.unlink(missing_ok=True)


def _cloud_run(run: str) -> tuple[list[Any], list[dict[str, Any]]]:
    """The tunnels to a monitored cloud run, and the targets Prometheus scrapes through them."""
    from cloudgpu import runs, settings
    from cloudgpu.commands import CloudError
    from cloudgpu.plan import PlanError, check_run_id
    from cloudgpu.vm import tunnels

    from .project import IMAGE

    try:
        record = runs.load(check_run_id(run, "--run"))
        if record is None:
            raise CloudError(f"--run {run}: no such run here (invoke status lists them)")
        found = tunnels.tunnels(record, settings.load(record["cloud"], IMAGE))
        tunnels.check_tools(record["cloud"])
    except (CloudError, PlanError) as error:
        raise Exit(f"error: {error}", code=2 if isinstance(error, PlanError) else 1) from None
    return found, tunnels.targets(record, found)


def _pin(dry_run: bool) -> None:
    """Record each exporter's digest: what a monitored VM pulls, never a moving tag."""
    from cloudgpu.commands import CloudError, Commands
    from cloudgpu.vm import exporters

    from .image import DOCKER

    try:
        pinned = exporters.pin(DOCKER, Commands(dry_run=dry_run))
    except CloudError as error:
        raise Exit(f"error: {error}", code=1) from None
    for name, reference in pinned.items():
        print(f"{name}: {reference}")
    if not dry_run:
        print(f"recorded in {exporters.EXPORTERS}")


def _find_binaries() -> tuple[dict[str, str], list[str]]:
    """Each program's path (its first name where it is missing), and what is missing."""
    found, missing = {}, []
    for program, (names, package) in PROGRAMS.items():
        path = next((p for p in map(shutil.which, names) if p), None)
        if path is None:
            missing.append(f"{program} (install: sudo apt-get install {package})")
        found[program] = path or names[0]
    return found, missing


def prometheus_config(home: Path, ports: dict[str, int], scrape: str, seconds: float) -> str:
    """prometheus.yml: the runs (file_sd: each announces itself in targets/), the Pushgateway
    (its pushed job and instance labels kept) and node_exporter, every `scrape`."""
    timeout = scrape if seconds < 10 else "10s"  # a scrape may not outlast its interval
    config = {
        "global": {
            "scrape_interval": scrape,
            "scrape_timeout": timeout,
            "evaluation_interval": scrape,
        },
        "rule_files": [str(ROOT / "monitoring" / "alerts.yml")],
        "scrape_configs": [
            {
                "job_name": PACKAGE,  # the job of the runs' pushes too
                "file_sd_configs": [
                    {"files": [str(home / "targets" / "*.json")], "refresh_interval": scrape}
                ],
            },
            {
                "job_name": "pushgateway",
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{ports['pushgateway']}"]}],
            },
            {
                "job_name": "node",
                "static_configs": [{"targets": [f"127.0.0.1:{ports['node_exporter']}"]}],
            },
        ],
    }
    # JSON is YAML, and needs no YAML library here.
    return f"# Written by `invoke monitor` (tasks/monitor.py).\n{json.dumps(config, indent=2)}\n"


def _commands(binaries: dict[str, str], home: Path, ports: dict[str, int]) -> dict[str, list]:
    def address(program: str) -> str:
        return f"--web.listen-address=127.0.0.1:{ports[program]}"

    return {
        "prometheus": [
            binaries["prometheus"], f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}", address("prometheus"),
        ],
        "pushgateway": [
            binaries["pushgateway"], address("pushgateway"),
            f"--persistence.file={home / 'pushgateway.state'}",
        ],
        "node_exporter": [binaries["node_exporter"], address("node_exporter")],
    }  # fmt: skip


def _serve(commands: dict[str, list], home: Path, ports: dict[str, int]) -> None:
    """Start the three, wait until each answers, print where; stop them on Ctrl-C or SIGTERM."""
    running: dict[str, subprocess.Popen] = {}
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        for program, command in commands.items():
            log = open(home / "logs" / f"{program}.log", "ab")  # noqa: SIM115 (the child's)
            running[program] = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches this task, which stops them in order
            )  # fmt: skip
            log.close()
        for program in commands:
            if program in ports:  # a tunnel is up before the VM serves: Prometheus retries
                _wait_ready(program, running[program], ports[program], home)
        _print_addresses(home, ports)
        while all(process.poll() is None for process in running.values()):
            time.sleep(0.5)
        ended = next(name for name, process in running.items() if process.poll() is not None)
        raise Exit(f"error: {ended} stopped: {_last_line(home, ended)}", code=1)
    except KeyboardInterrupt:
        print("stopping Prometheus, the Pushgateway and node_exporter")
    finally:
        _stop(running)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _wait_ready(program: str, process: subprocess.Popen, port: int, home: Path) -> None:
    path = "/metrics" if program == "node_exporter" else "/-/ready"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise Exit(f"error: {program} did not start: {_last_line(home, program)}", code=1)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise Exit(f"error: {program} did not answer on 127.0.0.1:{port} within 60 s", code=1)


def _last_line(home: Path, program: str) -> str:
    """The last line of a program's log: why it stopped (a port in use, a bad flag)."""
    lines = (home / "logs" / f"{program}.log").read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"


def _print_addresses(home: Path, ports: dict[str, int]) -> None:
    rows = [
        ("Prometheus", f"http://127.0.0.1:{ports['prometheus']}",
         "scrapes runs started with monitoring=prometheus"),
        ("Pushgateway", f"http://127.0.0.1:{ports['pushgateway']}",
         f"runs push here with monitoring.pushgateway=http://127.0.0.1:{ports['pushgateway']}"),
        ("node_exporter", f"http://127.0.0.1:{ports['node_exporter']}/metrics",
         "this machine's CPU, memory, disks"),
        ("alert rules", str(ROOT / "monitoring" / "alerts.yml"), ""),
        ("config", str(home / "prometheus.yml"), ""),
    ]  # fmt: skip
    for name, where, what in rows:
        print(f"{name:<14} {where}  {what}".rstrip())
    print("Ctrl-C stops them.", flush=True)


def _stop(running: dict[str, subprocess.Popen]) -> None:
    for process in running.values():
        if process.poll() is None:
            process.terminate()
    for process in running.values():
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
