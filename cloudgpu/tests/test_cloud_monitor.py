"""A cloud VM watched live (`invoke train --cloud=... --monitor`, `invoke monitor --run ID`): the
exporters it runs beside the trainer, by digest; the ports it serves, to the cloud's tunnel only;
the tunnel commands and the targets Prometheus scrapes through them. What needs a VM (a tunnel
that connects) cannot run here: the template's Docker tests run a monitored --cloud=local run
end to end."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import pytest
from baked_project import PROJECT_ROOT, invoke_cli, project_env
from cloudgpu.testing import google_api
from cloudgpu.vm import tunnels

DIGEST = "sha256:" + "3" * 64
IMAGE = f"registry.example/project@{DIGEST}"
EXPORTERS = json.loads((PROJECT_ROOT / "monitoring" / "exporters.json").read_text())


def pinned(tmp_path: Path) -> Path:
    """exporters.json with a digest for each exporter, as `invoke monitor --pin-exporters` does."""
    data = json.loads(json.dumps(EXPORTERS))
    for spec in data["exporters"].values():
        spec["digest"] = "sha256:" + "e" * 64
    path = tmp_path / "exporters.json"
    path.write_text(json.dumps(data))
    return path


def env_for(tmp_path: Path, settings: str, **more: str) -> dict[str, str]:
    (tmp_path / "cloud.toml").write_text(settings)
    return project_env(
        CLOUD_SETTINGS=str(tmp_path / "cloud.toml"), CLOUD_RUNS=str(tmp_path / "runs"), **more
    )


def startup_values(stdout: str) -> str:
    return stdout.split("--- startup script ---", 1)[1].split("--- end of startup script ---")[0]


def test_monitor_refuses_exporters_without_a_digest(tmp_path: Path) -> None:
    env = env_for(tmp_path, '[gcp]\nproject = "p"\n')
    done = invoke_cli("train", "--cloud=gcp", "--gpu=t4", "--monitor", "--dry-run",
                      f"--image={IMAGE}", env=env)  # fmt: skip
    assert done.returncode == 2
    node = EXPORTERS["exporters"]["node"]
    assert done.stderr.strip().startswith(
        f"error: --monitor: exporters.json has no digest for {node['image']}:{node['tag']}"
    )
    assert done.stderr.strip().endswith("pin them with invoke monitor --pin-exporters (it pulls "
                                        "each tag and records its digest)")  # fmt: skip


def test_a_monitored_gcp_vm_runs_the_exporters_by_digest_for_iap_only(tmp_path: Path) -> None:
    env = env_for(tmp_path, '[gcp]\nproject = "p"\n', CLOUD_EXPORTERS=str(pinned(tmp_path)))
    done = invoke_cli("train", "--cloud=gcp", "--gpu=t4", "--monitor", "--dry-run",
                      f"--image={IMAGE}", env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    script = startup_values(done.stdout)
    assert "MONITOR_PORT=9464\n" in script and "METRICS_BIND=0.0.0.0\n" in script
    exporters_line = script.split("EXPORTERS=", 1)[1]
    lines = shlex.split(exporters_line.split("\n\n", 1)[0])[0].splitlines()
    node, gpu = (shlex.split(line) for line in lines)
    assert f"quay.io/prometheus/node-exporter@sha256:{'e' * 64}" in node
    assert "--web.listen-address=0.0.0.0:9100" in node and "--net=host" in node
    assert f"nvcr.io/nvidia/k8s/dcgm-exporter@sha256:{'e' * 64}" in gpu
    assert gpu[-2:] == ["-a", "0.0.0.0:9400"] and "--gpus=all" in gpu
    create = next(line for line in done.stdout.splitlines() if "instances create" in line)
    assert "--tags=invoke-monitor" in shlex.split(create[2:])
    command = next(line for line in done.stdout.splitlines() if line.strip().startswith("command"))
    assert "monitoring=prometheus monitoring.host=0.0.0.0 monitoring.port=9464" in command
    allow, deny = tunnels.firewall_rules({"project": "p"}).values()
    assert "--source-ranges=35.235.240.0/20" in allow and "--target-tags=invoke-monitor" in allow
    assert "--rules=tcp:9464,tcp:9100,tcp:9400" in allow and "--action=allow" in allow
    # Every other source is refused, the VPC's own VMs too (the default network lets them in at
    # priority 65534); IAP's allow comes first.
    assert {"--action=deny", "--source-ranges=0.0.0.0/0", "--target-tags=invoke-monitor",
            "--rules=tcp:9464,tcp:9100,tcp:9400"} <= set(deny)  # fmt: skip
    priority = {rule[4]: int(next(a for a in rule if a.startswith("--priority="))[11:])
                for rule in (allow, deny)}  # fmt: skip
    assert priority["invoke-monitor-iap"] < priority["invoke-monitor-deny"] < 65534


def test_a_cpu_local_run_has_no_gpu_exporter_and_listens_on_loopback(tmp_path: Path) -> None:
    env = env_for(tmp_path, "[local]\n", CLOUD_EXPORTERS=str(pinned(tmp_path)))
    done = invoke_cli("train", "--cloud=local", "--monitor", "--dry-run", f"--image={IMAGE}",
                      env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    script = startup_values(done.stdout)
    assert "METRICS_BIND=127.0.0.1" in script
    exporters_value = script.split("EXPORTERS=", 1)[1].split("\n", 1)[0]
    assert "node-exporter@" in exporters_value and "dcgm-exporter" not in exporters_value


@pytest.mark.parametrize(
    ("flags", "settings", "message"),
    [
        (["--cloud=azure", "--gpu=t4"], '[azure]\nstorage_account = "s"\n',
         "error: --monitor on Azure: set subnet, bastion, bastion_group under [azure] in "
         "cloud.toml: a subnet of the network whose Bastion `invoke monitor --run ID` tunnels "
         "through, and only that Bastion reaches the metrics ports"),
        (["--cloud=aws", "--backend=managed", "--gpu=t4"], '[aws]\nbucket = "s3://b"\n',
         "error: --monitor is for --backend=vm: a training service reports its own nodes "
         "(CloudWatch, Cloud Monitoring, Azure Monitor)"),
    ],
    ids=["azure-without-subnet", "managed"],
)  # fmt: skip
def test_monitor_refusals_are_one_line(
    tmp_path: Path, flags: list[str], settings: str, message: str
) -> None:
    env = env_for(tmp_path, settings, CLOUD_EXPORTERS=str(pinned(tmp_path)))
    done = invoke_cli("train", *flags, "--monitor", "--dry-run", f"--image={IMAGE}", env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == message


def record(tmp_path: Path, cloud: str, **fields: object) -> str:
    run = f"proj-261201-120000-{cloud[:2]}00"
    folder = tmp_path / "runs" / run
    folder.mkdir(parents=True)
    base = {"run": run, "cloud": cloud, "region": "us-east-1", "zone": "us-central1-b",
            "monitor": True, "gpus": 1, "bucket": "s3://b/p/r", "deadline": ""}  # fmt: skip
    (folder / "run.json").write_text(json.dumps(base | fields))
    return run


def monitor_dry_run(tmp_path: Path, run: str, settings: str, **more: str) -> list[list[str]]:
    env = env_for(tmp_path, settings, **more)
    done = invoke_cli("monitor", "--run", run, "--dry-run", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    targets = json.loads(done.stdout.split("cloud-" + run + ".json\n", 1)[1].splitlines()[0])
    assert [t["labels"]["source"] for t in targets] == ["trainer", "node", "gpu"]
    assert {t["labels"]["cloud_run"] for t in targets} == {run}
    ports = [t["targets"][0] for t in targets]
    starts = ("aws ssm", "gcloud compute start-iap", "az network")
    tunnel_lines = [
        shlex.split(line) for line in done.stdout.splitlines() if line.startswith(starts)
    ]
    assert len(tunnel_lines) == 3 and all(p.startswith("127.0.0.1:") for p in ports)
    return tunnel_lines


def test_monitor_run_tunnels_with_session_manager_on_aws(tmp_path: Path) -> None:
    run = record(tmp_path, "aws", instance_id="i-0123456789abcdef0")
    plugin = tmp_path / "bin" / "session-manager-plugin"
    plugin.parent.mkdir()
    plugin.write_text("#!/bin/sh\n")
    plugin.chmod(0o755)
    env_path = f"{plugin.parent}:{project_env()['PATH']}"
    commands = monitor_dry_run(tmp_path, run, "[aws]\n", PATH=env_path)
    first = commands[0]
    assert first[:5] == ["aws", "ssm", "start-session", "--target", "i-0123456789abcdef0"]
    assert first[first.index("--document-name") + 1] == "AWS-StartPortForwardingSession"
    parameters = json.loads(first[first.index("--parameters") + 1])
    assert parameters["portNumber"] == ["9464"]


def test_monitor_run_without_the_session_manager_plugin_says_how_to_get_it(tmp_path: Path) -> None:
    run = record(tmp_path, "aws", instance_id="i-0123456789abcdef0")
    env = env_for(tmp_path, "[aws]\n", PATH="/usr/bin:/bin")
    done = invoke_cli("monitor", "--run", run, "--dry-run", env=env)
    assert done.returncode == 1
    assert done.stderr.strip().startswith(
        "error: session-manager-plugin not found (aws ssm start-session needs it): install"
    )


def test_monitor_run_tunnels_with_iap_on_gcp(tmp_path: Path) -> None:
    run = record(tmp_path, "gcp")
    commands = monitor_dry_run(tmp_path, run, '[gcp]\nproject = "p"\n')
    assert commands[1][:6] == ["gcloud", "compute", "start-iap-tunnel", run, "9100",
                               commands[1][5]]  # fmt: skip
    assert commands[1][5].startswith("--local-host-port=localhost:")
    assert "--zone=us-central1-b" in commands[1] and "--project=p" in commands[1]


@pytest.mark.needs("gcloud")
def test_the_real_gcloud_takes_the_iap_tunnel_command(tmp_path: Path) -> None:
    """gcloud parses the tunnel's command line and looks the VM up (the stand-in's), then stops
    where IAP itself would answer: nothing here reaches Google."""
    run = record(tmp_path, "gcp")
    (command, *_) = monitor_dry_run(tmp_path, run, '[gcp]\nproject = "p"\n')
    with google_api.serve() as api:
        api.instances[run] = {"name": run, "zone": f"{api.url}/compute/v1/projects/p/zones/"
                              "us-central1-b", "status": "RUNNING"}  # fmt: skip
        done = subprocess.run(
            command, env=project_env(**google_api.gcloud_env(api, tmp_path)),
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert "unrecognized arguments" not in done.stderr and "argument" not in done.stderr.lower()
    assert api.bodies("GET", rf"/projects/p/zones/us-central1-b/instances/{run}$") == [None]
    assert "Testing if tunnel connection works" in done.stderr, done.stderr[-2000:]


def test_monitor_run_tunnels_through_bastion_on_azure(tmp_path: Path) -> None:
    run = record(tmp_path, "azure")
    settings = ('[azure]\nsubscription = "0000"\nbastion = "hub"\nbastion_group = "net"\n'
                'subnet = "/subscriptions/0000/resourceGroups/net/providers/x"\n')  # fmt: skip
    commands = monitor_dry_run(tmp_path, run, settings)
    gpu = commands[2]
    assert gpu[:4] == ["az", "network", "bastion", "tunnel"]
    assert gpu[gpu.index("--target-resource-id") + 1] == (
        f"/subscriptions/0000/resourceGroups/{run}/providers/Microsoft.Compute/"
        f"virtualMachines/{run}"
    )
    assert gpu[gpu.index("--resource-port") + 1] == "9400"


@pytest.mark.parametrize(
    ("fields", "settings", "message"),
    [
        ({"monitor": False}, "[gcp]\nproject = \"p\"\n", "was not started with --monitor"),
        ({}, "[azure]\nsubscription = \"0\"\n",
         "no Azure Bastion to tunnel through: set bastion and bastion_group under [azure]"),
    ],
    ids=["not-monitored", "azure-without-bastion"],
)  # fmt: skip
def test_monitor_run_refusals_are_one_line(
    tmp_path: Path, fields: dict, settings: str, message: str
) -> None:
    cloud = "azure" if "azure" in settings else "gcp"
    run = record(tmp_path, cloud, **fields)
    done = invoke_cli("monitor", "--run", run, "--dry-run", env=env_for(tmp_path, settings))
    assert done.returncode == 1
    (line,) = done.stderr.strip().splitlines()
    assert message in line
