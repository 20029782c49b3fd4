"""The project's tasks: `invoke --list`, `invoke <task> --help`.

Hydra overrides go after `--`: `invoke train -- model=cnn trainer.max_epochs=5`.
Tasks import only the standard library, so `invoke --list` stays instant; the heavy imports
happen in the processes they start.

    run.py      setup, train (here, or --cloud=...), evaluate, export, crossval, sweep
    serving.py  serve: an exported model here, or in the serving image on Docker
    dev.py      test, lint, format
    image.py    the training image: build, push (to a cloud's registry too), run, shell, lock
    remote_plan.py remote_run.py machine_flags.py
                invoke train --cloud=...: the plan, its price and the question; the VM or job
                started and followed (the cloudgpu package does the work); the machine the
                flags choose
    remote.py   the cloud runs: status, logs, stop
    offers.py   what they can run on: machines (CPU and GPU), gpus
    estimate.py profiling.py loopback.py
                invoke estimate: the run profiled here, then its time and cost on N machines
                of each type (cloudgpu/estimate.py's model)
    managed.py  jobs of the clouds' training services (--backend=managed|skypilot)
    endpoints.py   a trained run on a managed endpoint: deploy, endpoints, predict, undeploy
    data.py     datasets: shards for data=shards (data.prepare), to the bucket (data.push)
    gpu_check.py   invoke gpu-check: on an NVIDIA GPU, the GPU tests and benchmark, one report
    monitor.py  Prometheus, a Pushgateway and node_exporter for the runs here, and a cloud run's
                metrics through its tunnel (invoke monitor [--run ID])
    framework.py   what differs between frameworks (install, multi-device launch, index)
"""

import os
import sys
from pathlib import Path

from invoke import Collection

# invoke puts tasks/ on sys.path, not the project: the tasks import each other as a package.
# The cloudgpu package (pinned in pyproject.toml) acts on this project, wherever invoke started.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["CLOUDGPU_PROJECT"] = str(Path(__file__).resolve().parent.parent)

from . import (
    data,
    dev,
    endpoints,
    estimate,
    gpu_check,
    image,
    monitor,
    offers,
    remote,
    run,
    serving,
)
from .args import check_command_line

namespace = Collection()
# invoke build, invoke status, ...
for module in (run, serving, dev, monitor, image, remote, offers, estimate, gpu_check, endpoints):
    for task in Collection.from_module(module).tasks.values():
        namespace.add_task(task)
namespace.add_collection(Collection.from_module(data, name="data"))  # invoke data.prepare

check_command_line(namespace)
