{%- set pt = cookiecutter.framework == "pytorch" -%}
"""Scaling over nodes on this machine's Docker engine: training steps per second of 1 and 2 nodes
(containers of the project's image on a network of their own, each told where it stands by a
SageMaker-style resourceconfig.json, as a managed job's nodes are) at the same global batch,
beside the ideal (N times one node){% if pt %}; and the time one all-reduce of the model's
gradients takes between the nodes, timed alone{% endif %}. The same command runs unchanged on a
GPU machine: --gpus gives every container that many GPUs.

    invoke build --cpu && python benchmarks/scaling.py --image {{ cookiecutter.project_slug }}:<tag>-cpu

Steps per second come from the run's log: the optimizer steps of epochs 2..E over the time
between the end of epoch 1 and the end of epoch E (start-up, rendezvous and the test split
left out; each epoch's validation kept in). On one machine the nodes share its cores, so the
ideal is not reachable here: what the table shows is the cost of the coordination. On the CPU
each node's trainer has its share of the cores as threads, as a launcher shares a machine's
between its processes: with more threads than cores they spin while they wait for each
other, and the table would show that instead.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ["CLOUDGPU_PROJECT"] = str(ROOT)  # the tasks' view of this project, wherever run from
from cloudgpu.tasks.project import framework  # noqa: E402

PACKAGE = "{{ cookiecutter.package_name }}"
CONFIG = "/opt/ml/input/config/resourceconfig.json"
RUN = "/opt/ml/checkpoints/run"
EPOCH_LINE = re.compile(r"^\[([\d-]+ [\d:,]+)\]\[[^]]+\]\[INFO\] - epoch (\d+)/(\d+)")
{%- if pt %}
PARAMETERS = re.compile(r"model \S+: ([\d,]+) parameters")
ALL_REDUCE = """
import os, statistics, sys, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
grads = torch.zeros(int(sys.argv[1]))
for _ in range(5):
    dist.all_reduce(grads)
times = []
for _ in range(int(sys.argv[2])):
    dist.barrier()
    started = time.perf_counter()
    dist.all_reduce(grads)
    times.append(time.perf_counter() - started)
if dist.get_rank() == 0:
    print("ALL_REDUCE_MS", 1000 * statistics.median(times))
dist.destroy_process_group()
"""
{%- endif %}


def docker(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    client = os.environ.get("DOCKER", "docker")
    return subprocess.run([client, *args], capture_output=True, text=True, timeout=timeout)


def must(done: subprocess.CompletedProcess[str], what: str) -> str:
    if done.returncode != 0:
        sys.exit(f"{what} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return done.stdout


def nodes_run(
    args: argparse.Namespace,
    count: int,
    command: list[str],
    scratch: Path,
    files: dict[str, str] | None = None,
    cpusets: list[str] | None = None,
) -> list[str]:
    """Run `command` in `count` containers as the nodes of one job, with `files` in each node's
    /opt/ml/checkpoints (and node i on the CPUs cpusets[i], as a machine of its own has them);
    each node's output."""
    network = f"scaling-{count}-{uuid.uuid4().hex[:8]}"
    hosts = [f"algo-{i + 1}" for i in range(count)]
    must(docker("network", "create", network), "docker network create")
    names = [f"{network}-{host}" for host in hosts]
    try:
        for index, (host, name) in enumerate(zip(hosts, names, strict=True)):
            folder = scratch / network / host
            (folder / "checkpoints").mkdir(parents=True)
            for filename, text in (files or {}).items():
                (folder / "checkpoints" / filename).write_text(text)
            if os.getuid() == 0:  # the image's user writes there
                shutil.chown(folder / "checkpoints", 1000, 1000)
            config = {"current_host": host, "hosts": hosts, "network_interface_name": "eth0"}
            (folder / "resourceconfig.json").write_text(json.dumps(config))
            placed = ["--gpus", str(args.gpus)] if args.gpus else []
            if cpusets:
                placed.append(f"--cpuset-cpus={cpusets[index]}")
            must(
                docker(
                    "run", "--detach", f"--name={name}", f"--network={network}",
                    f"--hostname={host}", f"--network-alias={host}", *placed, "--shm-size=2g",
                    f"--volume={folder / 'resourceconfig.json'}:{CONFIG}:ro",
                    f"--volume={folder / 'checkpoints'}:/opt/ml/checkpoints",
                    "--entrypoint=dumb-init", args.image, "--", *command,
                ),
                "docker run",
            )  # fmt: skip
        codes = [docker("wait", name).stdout.strip() for name in names]
        outputs = [docker("logs", name) for name in names]
        if codes != ["0"] * count:
            sys.exit("a node failed:\n" + outputs[0].stdout[-3000:] + outputs[0].stderr[-3000:])
        return [done.stdout + done.stderr for done in outputs]
    finally:
        docker("rm", "--force", *names)
        docker("network", "rm", network)


def steps_per_second(log: str, steps_per_epoch: int) -> float:
    """Optimizer steps of epochs 2..E over the seconds from the end of epoch 1 to that of E."""
    ends = [
        datetime.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f")
        for m in (EPOCH_LINE.match(line) for line in log.splitlines())
        if m
    ]
    if len(ends) < 2:
        sys.exit(f"fewer than two epoch lines in the log:\n{log[-2000:]}")
    return steps_per_epoch * (len(ends) - 1) / (ends[-1] - ends[0]).total_seconds()


def node_threads(nodes: int) -> list[str]:
    """`env` giving each of `nodes` CPU nodes' trainers its share of this machine's cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    pinned = framework.thread_env(max(1, (cores or 1) // nodes))
    return ["env", *(f"{name}={value}" for name, value in pinned.items())]


def per_node_batch(global_batch: int, nodes: int) -> int:
{%- if pt %}
    return global_batch // nodes  # data.batch_size is each rank's
{%- else %}
    del nodes
    return global_batch  # data.batch_size is the whole step's, over every worker
{%- endif %}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the project's image, by tag or digest")
    parser.add_argument("--nodes", default="1,2", help="node counts, e.g. 1,2,4")
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per epoch")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=0, help="GPUs per node (0: the CPU)")
    args = parser.parse_args()
    counts = [int(n) for n in args.nodes.split(",")]
    rows: dict[int, list[float]] = {}
{%- if pt %}
    parameters = 0
{%- endif %}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.rounds):
            for count in counts:
                overrides = [
                    f"hydra.run.dir={RUN}",
                    "logger=jsonl",
                    "test=false",
                    "callbacks.early_stopping=null",
                    f"trainer.max_epochs={args.epochs}",
                    f"trainer.limit_train_batches={args.steps}",
                    f"trainer.device={'cuda' if args.gpus else 'cpu'}",
                    f"data.batch_size={per_node_batch(args.global_batch, count)}",
                ]
                threads = [] if args.gpus else node_threads(count)
                command = [*threads, "python", "-m", f"{PACKAGE}.launch", *overrides]
                logs = nodes_run(args, count, command, Path(scratch))
                rows.setdefault(count, []).append(steps_per_second(logs[0], args.steps))
{%- if pt %}
                if found := PARAMETERS.search(logs[0]):
                    parameters = int(found[1].replace(",", ""))
        reduce_ms = None
        if max(counts) > 1 and parameters:
            reduce_ms = all_reduce_ms(args, max(counts), parameters, Path(scratch))
{%- endif %}
    one = statistics.median(rows[counts[0]]) / counts[0]
    device = f"{args.gpus} GPU(s)" if args.gpus else "the CPU"
    print(
        f"global batch {args.global_batch}, {args.steps} steps x {args.epochs} epochs, "
        f"{args.rounds} rounds, {device} per node"
    )
    print(f"{'nodes':>5}  {'steps/s':>8}  {'samples/s':>9}  {'ideal steps/s':>13}  {'of ideal':>8}")
    for count in counts:
        rate = statistics.median(rows[count])
        ideal = one * count
        samples = rate * args.global_batch
        print(f"{count:>5}  {rate:8.2f}  {samples:9.0f}  {ideal:13.2f}  {rate / ideal:8.2f}")
    figures: dict[str, object] = {"steps_per_s": {n: statistics.median(v) for n, v in rows.items()}}
{%- if pt %}
    if reduce_ms is not None:
        print(
            f"one all-reduce of {parameters:,} float32 gradients over {max(counts)} nodes "
            f"(gloo, timed alone): {reduce_ms:.2f} ms median"
        )
    figures["all_reduce_ms"] = reduce_ms
{%- else %}
    print("all-reduce time: not measured separately (the collectives run inside Keras fit)")
{%- endif %}
    print(json.dumps(figures))
{%- if pt %}


def all_reduce_ms(args: argparse.Namespace, count: int, parameters: int, scratch: Path) -> float:
    """The median time of one all-reduce of `parameters` float32 values over `count` nodes."""
    rank = (
        f"$(python -c \"import json; c = json.load(open('{CONFIG}')); "
        "print(sorted(c['hosts']).index(c['current_host']))\")"
    )
    launch = (
        f"python -m torch.distributed.run --nproc-per-node=1 --nnodes={count} "
        f"--node-rank={rank} --master-addr=algo-1 --master-port=29500 "
        f"/opt/ml/checkpoints/all_reduce.py {parameters} 50"
    )
    logs = nodes_run(args, count, ["sh", "-c", launch], scratch, {"all_reduce.py": ALL_REDUCE})
    found = re.search(r"ALL_REDUCE_MS ([\d.]+)", logs[0])
    if not found:
        sys.exit(f"the all-reduce run printed no time:\n{logs[0][-2000:]}")
    return float(found[1])
{%- endif %}


if __name__ == "__main__":
    main()
