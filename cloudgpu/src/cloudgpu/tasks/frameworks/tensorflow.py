"""What the tasks do differently for TensorFlow: its install (two distributions of one package)
and its launch on several devices."""

from __future__ import annotations

import json
from typing import Any

NAME = "TensorFlow"
IMPORT = "tensorflow"  # the module `invoke --list` must never import
# What `invoke export` offers: training/formats.py's FORMATS (tests check that they agree).
EXPORT_FORMATS = ("saved_model",)
BATCH_IS_GLOBAL = True  # data.batch_size is the whole step's, split over the workers
GPUS_HELP = (
    "GPUs for MirroredStrategy in this one process (without a GPU: logical CPU devices); "
    "1 trains on one device"
)
FIND_LINKS_BUILD_HELP = "a URL of wheels pip reads as well (a mirror, a wheelhouse)"
FIND_LINKS_LOCK_HELP = "a folder or URL of wheels uv reads as well (a mirror, a wheelhouse)"


def setup_command(python: str, cpu: bool) -> str:
    """The pip command of `invoke setup`: `dev` is the CPU build and the tools."""
    extras = "dev" if cpu else "gpu,tools"
    return f"{python} -m pip install -e '.[{extras}]'"


def train_command(python: str, package: str, gpus: int, overrides: str) -> tuple[str, dict]:
    """The training command for `gpus` devices, and its environment: one process replicates
    the model over the devices (MirroredStrategy)."""
    env = {"NUM_REPLICAS": str(gpus)} if gpus > 1 else {}
    return f"{python} -m {package}.train {overrides}".strip(), env


def image_build_args(cpu: bool, find_links: str) -> dict[str, str]:
    """Build arguments of the image beyond the shared ones: none."""
    del cpu, find_links
    return {}


def lock_args(flavour: str, find_links: str) -> list[str]:
    """uv arguments that lock `flavour` (gpu or cpu): each is an extra of pyproject.toml."""
    pins = ["--constraint", "requirements/cuda.txt"] if flavour == "gpu" else []
    return ["--extra", flavour, *pins, *(["--find-links", find_links] if find_links else [])]


def serve_lock_args(flavour: str, find_links: str) -> tuple[str, list[str]]:
    """The serving lock's framework requirement and uv arguments (beside requirements/serve.in
    and the training lock of `flavour` as constraints): pyproject.toml's extra of `flavour`."""
    requirement = "tensorflow[and-cuda]" if flavour == "gpu" else "tensorflow-cpu"
    return requirement, ["--find-links", find_links] if find_links else []


def thread_env(threads: int) -> dict[str, str]:
    """The environment that gives the trainer `threads` CPU threads: TensorFlow's intra-op pool
    (runtime.pin_threads) and oneDNN's OpenMP."""
    return {"TF_NUM_INTRAOP_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}


def pair_env(rank: int, ports: tuple[int, int]) -> dict[str, str]:
    """Process `rank` of two data-parallel workers on this machine (MultiWorkerMirroredStrategy
    from TF_CONFIG: invoke estimate times a step of the pair)."""
    workers = [f"127.0.0.1:{port}" for port in ports]
    task = {"type": "worker", "index": rank}
    return {"TF_CONFIG": json.dumps({"cluster": {"worker": workers}, "task": task})}


def container_command(package: str, gpus: int, overrides: list[str], threads: int = 0) -> list[str]:
    """What a cloud run's container runs (under dumb-init): one process over the machine's GPUs;
    on a CPU machine, TensorFlow's intra-op pool (and oneDNN's OpenMP) as wide as its `threads`
    physical cores: its default, every logical CPU, puts two threads on each core."""
    pinned = [f"{k}={v}" for k, v in thread_env(threads).items()] if threads else []
    replicas = [f"NUM_REPLICAS={gpus}"] if gpus > 1 else []
    prefix = ["env", *replicas, *pinned] if replicas or pinned else []
    return [*prefix, "python", "-m", f"{package}.train", *overrides]


def azureml_distribution(nodes: int) -> dict[str, Any]:
    """Azure ML's `distribution` of a job over `nodes`: a worker a node, each given TF_CONFIG,
    which launch.py keeps for MultiWorkerMirroredStrategy."""
    return {"type": "tensorflow", "worker_count": nodes}
