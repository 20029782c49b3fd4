"""CPU machines: the catalog's rows (machines.json) complete and sourced, `--cpus N [--memory GB]`
choosing the cheapest machine that fits, `--machine TYPE`, and each cloud's run of one: the CPU
image, a VM image without an NVIDIA driver, no GPU attached or waited for, the trainer's threads
set from the machine's cores. Bad choices are one line listing what is offered. The dry runs are
`slow` (a dozen invoke processes): the second tier runs them, in one framework's project."""

from __future__ import annotations

import datetime
import re
import shlex
from pathlib import Path

import pytest
from baked_project import invoke_cli, project_env

from cloudgpu import catalog, machines

DIGEST = "sha256:" + "4" * 64
KINDS = {"compute", "general", "memory"}


def test_every_cpu_machine_is_complete_priced_and_sourced() -> None:
    data = machines.load()
    assert datetime.date.fromisoformat(data["as_of"]) <= datetime.date.today()
    for source in data["sources"].values():
        assert source["url"].startswith("https://") and source["what"]
        assert datetime.date.fromisoformat(source["read"]) <= datetime.date.today()
    for cloud in catalog.CLOUDS:
        offered = data["clouds"][cloud]
        assert offered["image"]["source"] in data["sources"]
        for name, family in offered["families"].items():
            assert family["vendor"] in ("intel", "amd") and family["cpu"], name
            assert family["threads_per_core"] in (1, 2) and family["source"] in data["sources"]
        vendors = {offered["families"][m["family"]]["vendor"] for m in offered["machines"]}
        assert vendors == {"intel", "amd"}, f"{cloud}: Intel and AMD machines"
        assert {m["kind"] for m in offered["machines"]} == KINDS, cloud
        for entry in offered["machines"]:
            assert entry["source"] in data["sources"] and entry["kind"] in KINDS, entry
            assert entry["network_source"] in data["sources"] and entry["network"], entry
        for offer in machines.rows(cloud):
            assert offer.is_cpu and offer.vcpus > 0 and offer.memory_gib > 0, offer
            assert 0 < offer.cores <= offer.vcpus and offer.on_demand > 0, offer
            assert offer.spot is None or 0 < offer.spot < offer.on_demand, offer
            assert offer.region == catalog.load()["clouds"][cloud]["region"]


@pytest.mark.parametrize("cloud", catalog.CLOUDS)
def test_cpus_and_memory_pick_the_cheapest_machine_that_fits(cloud: str) -> None:
    offered = machines.rows(cloud)
    for cpus, memory, spot in [(1, 0, False), (16, 0, False), (32, 0, True), (8, 64, False)]:
        chosen = machines.cpu_offer(cloud, cpus, memory, spot)
        assert chosen.vcpus >= cpus and chosen.memory_gib >= memory
        fits = [o for o in offered if o.vcpus >= cpus and o.memory_gib >= memory]
        assert chosen.price(spot) == min(o.price(spot) for o in fits if o.price(spot))
    biggest = max(offered, key=lambda o: o.vcpus)
    with pytest.raises(catalog.CatalogError, match=f"the most is {biggest.vcpus} "):
        machines.cpu_offer(cloud, biggest.vcpus + 1)
    with pytest.raises(catalog.CatalogError, match="GiB; the most is"):
        machines.cpu_offer(cloud, 2, 100_000)


@pytest.mark.slow
def test_machines_lists_both_kinds_with_the_filters() -> None:
    done = invoke_cli("machines", "--cloud", "aws", "--cpus", "32", "--memory", "128")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines()[1:] if line.startswith("aws ")]
    assert rows, done.stdout
    assert all(int(row[2]) >= 32 and float(row[3]) >= 128 for row in rows), rows
    names = {row[1] for row in rows}
    assert {o.machine for o in machines.rows("aws") if o.vcpus >= 32 and o.memory_gib >= 128} \
        <= names  # fmt: skip
    assert any(re.fullmatch(r"[a-z0-9]+:\d+", row[4]) for row in rows), "GPU machines too"
    assert "read 2026-" in done.stdout
    cpu_only = invoke_cli("machines", "--kind", "cpu", "--cloud", "gcp")
    assert cpu_only.returncode == 0 and "t4:" not in cpu_only.stdout
    assert {o.machine for o in machines.rows("gcp")} <= set(cpu_only.stdout.split())
    with_t4 = invoke_cli("machines", "--gpu", "t4")
    assert with_t4.returncode == 0 and "c7i." not in with_t4.stdout and "t4:1" in with_t4.stdout
    refusals = [
        (["--kind", "tpu"], "--kind 'tpu': choose one of cpu, gpu"),
        (["--cpus", "many"], "--cpus 'many': give a whole number"),
        (["--cloud", "ibm"], "--cloud 'ibm': choose one of aws, gcp, azure"),
    ]
    for bad, message in refusals:
        refused = invoke_cli("machines", *bad)
        assert refused.returncode == 2 and message in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cloud=aws", "--cpus=32", "--gpu=t4"], "--gpu with --cpus: choose the machine one way"),
        (["--cloud=aws", "--machine=c7i.8xlarge", "--cpus=8"], "--cpus with --machine"),
        (["--cloud=aws", "--cpus=100000"], "no aws machine in the catalog has 100000 vCPUs"),
        (["--cloud=gcp", "--cpus=8", "--memory=99999"], "has 99999 GiB; the most is"),
        (["--cloud=aws", "--machine=c7i.9xlarge"], "did you mean c7i."),
        (["--cloud=azure", "--machine=nope"], "azure has no such machine in the catalog"),
        (["--cloud=aws", "--cpus=lots"], "--cpus 'lots': give a whole number"),
        (["--cloud=local", "--cpus=4"], "--cpus: picks a cloud machine; --cloud=local runs"),
        (["--cpus=4"], "--cpus, --dry-run, --image: only with --cloud"),
        (["--cloud=gcp", "--cpus=100", "--backend=managed"], "that Vertex AI trains on has 100"),
    ],
)
def test_a_cpu_run_that_cannot_work_is_refused_before_anything(
    args: list[str], message: str, tmp_path: Path
) -> None:
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    done = invoke_cli("train", *args, f"--image=r@{DIGEST}", "--dry-run", env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "$ " not in done.stdout and not (tmp_path / "runs").exists()


def dry_run(tmp_path: Path, cloud: str, *flags: str) -> tuple[str, list[list[str]], str]:
    """What `invoke train --cloud=CLOUD FLAGS --dry-run` prints: all of it, the cloud CLI's
    commands, and the startup script."""
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    done = invoke_cli("train", f"--cloud={cloud}", *flags, "--dry-run", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    commands = [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("$ ")]
    script = done.stdout.split("--- startup script ---", 1)[1].split("--- end of", 1)[0]
    return done.stdout, commands, script


def option(command: list[str], name: str) -> str:
    """`--name value` or `--name=value` of a command line."""
    for index, word in enumerate(command):
        if word == name:
            return command[index + 1]
        if word.startswith(f"{name}="):
            return word.split("=", 1)[1]
    raise AssertionError(f"{name} not in {command}")


@pytest.mark.slow
@pytest.mark.parametrize("cloud", catalog.CLOUDS)
def test_a_cpu_dry_run_builds_the_cpu_image_and_boots_no_gpu(cloud: str, tmp_path: Path) -> None:
    chosen = machines.cpu_offer(cloud, 16, spot=True)
    printed, commands, script = dry_run(tmp_path, cloud, "--cpus=16", "--spot")
    assert "$ invoke build --cpu" in printed, "the CPU image, not the CUDA one"
    assert re.search(rf"machine\s+{re.escape(chosen.machine)} \(16 vCPUs", printed) or \
        re.search(rf"machine\s+{re.escape(chosen.machine)} ", printed), printed  # fmt: skip
    assert re.search(rf"CPU\s+.*{chosen.cores} cores, a trainer thread each, spot", printed)
    assert f"${chosen.spot:.3f}/h" in printed
    assert "GPUS=0" in script and "nvidia" not in script.split("# --- the run's values")[1][:4000]
    assert f"OMP_NUM_THREADS={chosen.cores}" in script, "the trainer's threads: the cores"
    image = machines.vm_image(cloud)
    creates = [c for c in commands if c[:3] in (["aws", "ec2", "run-instances"],
                                                ["gcloud", "compute", "instances"],
                                                ["az", "vm", "create"])]  # fmt: skip
    (create,) = [c for c in creates if "create" in c or "run-instances" in c]
    if cloud == "aws":
        assert option(create, "--instance-type") == chosen.machine
        assert f"DeviceName={image['root_device']}," in option(create, "--block-device-mappings")
        ssm = [c for c in commands if c[:3] == ["aws", "ssm", "get-parameter"]]
        assert ssm and option(ssm[0], "--name") == image["name"]
        assert "MarketType" in option(create, "--instance-market-options")
    elif cloud == "gcp":
        assert option(create, "--machine-type") == chosen.machine
        assert not any(word.startswith("--accelerator") for word in create)
        assert "install-nvidia-driver" not in option(create, "--metadata")
        assert option(create, "--image-family") == image["family"]
        assert option(create, "--image-project") == image["project"]
    else:
        assert option(create, "--size") == chosen.machine
        assert option(create, "--image") == image["urn"]
        assert option(create, "--priority") == "Spot"


@pytest.mark.slow
def test_a_named_machine_runs_as_named_cpu_or_gpu(tmp_path: Path) -> None:
    cpu = machines.rows("gcp")[-1]
    printed, _, script = dry_run(tmp_path, "gcp", f"--machine={cpu.machine}")
    assert f"--machine-type={cpu.machine}" in printed and "GPUS=0" in script
    assert "$ invoke build --cpu" in printed
    gpu = catalog.offer("gcp", "l4", 1)  # its GPU built into the machine type
    printed, _, script = dry_run(tmp_path / "gpu", "gcp", f"--machine={gpu.machine}")
    assert f"--machine-type={gpu.machine}" in printed and "GPUS=1" in script
    assert "install-nvidia-driver=True" in printed and "invoke build --cpu" not in printed
    env = project_env(CLOUD_RUNS=str(tmp_path / "runs"), CLOUD_SETTINGS=str(tmp_path / "none"))
    host = catalog.offer("gcp", "t4", 1).machine  # an N1 host: which GPU is attached is a choice
    done = invoke_cli("train", "--cloud=gcp", f"--machine={host}", "--dry-run", env=env)
    assert done.returncode == 2 and "hosts several GPUs on gcp; give --gpu t4:1" in done.stderr
