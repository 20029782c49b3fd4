"""What the tasks do differently for PyTorch: its install, its launch on several devices, and the
package index its CPU image and lock need."""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlsplit

NAME = "PyTorch"
IMPORT = "torch"  # the module `invoke --list` must never import
# What `invoke export` offers: training/formats.py's FORMATS (tests check that they agree).
EXPORT_FORMATS = ("pt2",)
# torch==X from PyPI is the CUDA build on Linux (several GB); this index has the CPU build.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BATCH_IS_GLOBAL = False  # data.batch_size is each process's: N nodes train on N times the batch
GPUS_HELP = "GPUs (or CPU processes) for DDP through torchrun; 1 runs a single process"
FIND_LINKS_BUILD_HELP = (
    "a URL of wheels pip reads as well (a mirror, a wheelhouse); for the CPU image it replaces "
    "PyTorch's CPU index"
)
FIND_LINKS_LOCK_HELP = (
    "a folder or URL of wheels for the CPU lock, read instead of PyTorch's CPU index (offline, "
    "or behind a mirror)"
)


def setup_command(python: str, cpu: bool) -> str:
    """The pip command of `invoke setup`: the CPU build from PyTorch's index, or PyPI's CUDA."""
    index = f"--extra-index-url {CPU_INDEX} " if cpu and _resolves(CPU_INDEX) else ""
    return f"{python} -m pip install {index}-e '.[dev]'"


def _resolves(url: str) -> bool:
    """Whether `url`'s host has an address: pip retries an index that has none for minutes."""
    try:
        socket.getaddrinfo(urlsplit(url).hostname, 443)
    except OSError:
        print(f"note: {url} does not resolve; pip uses the indexes it is configured with")
        return False
    return True


def train_command(python: str, package: str, gpus: int, overrides: str) -> tuple[str, dict]:
    """The training command for `gpus` devices, and its environment: torchrun runs DDP."""
    if gpus == 1:
        return f"{python} -m {package}.train {overrides}".strip(), {}
    launch = f"{python} -m torch.distributed.run --standalone --nproc-per-node={gpus}"
    # torchrun gives each process one CPU thread unless told otherwise (and says so at length).
    threads = os.environ.get("OMP_NUM_THREADS") or str(max(1, (os.cpu_count() or 1) // gpus))
    return f"{launch} -m {package}.train {overrides}".strip(), {"OMP_NUM_THREADS": threads}


def image_build_args(cpu: bool, find_links: str) -> dict[str, str]:
    """Build arguments of the image: PyPI's Linux torch is the CUDA build, so the CPU lock's
    torch comes from PyTorch's index (or from --find-links)."""
    return {"EXTRA_INDEX_URL": CPU_INDEX if cpu and not find_links else ""}


def lock_args(flavour: str, find_links: str) -> list[str]:
    """uv arguments that lock `flavour` (gpu or cpu)."""
    if flavour == "gpu":
        return ["--constraint", "requirements/cuda.txt"]
    # The CPU build (torch==X+cpu) comes from PyTorch's index or from --find-links, and wins
    # over PyPI's only with the best-match strategy.
    source = ["--find-links", find_links] if find_links else ["--extra-index-url", CPU_INDEX]
    return ["--index-strategy", "unsafe-best-match", *source]


def serve_lock_args(flavour: str, find_links: str) -> tuple[str, list[str]]:
    """The serving lock's framework requirement and uv arguments (beside requirements/serve.in
    and the training lock of `flavour` as constraints): the same torch build as training's."""
    return "torch", lock_args(flavour, find_links)


def thread_env(threads: int) -> dict[str, str]:
    """The environment that gives the trainer `threads` CPU threads (torch reads OpenMP's)."""
    return {"OMP_NUM_THREADS": str(threads)}


def pair_env(rank: int, ports: tuple[int, int]) -> dict[str, str]:
    """Process `rank` of two data-parallel processes on this machine (DDP over gloo, joined
    as torchrun would join them: invoke estimate times a step of the pair)."""
    return {
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ports[0]),
    }  # fmt: skip


def container_command(package: str, gpus: int, overrides: list[str], threads: int = 0) -> list[str]:
    """What a cloud run's container runs (under dumb-init): DDP over the machine's GPUs; on a CPU
    machine one process whose intra-op threads are the machine's `threads` physical cores (OpenMP
    reads OMP_NUM_THREADS, and torch takes its thread count from it)."""
    pinned = ["env", *(f"{k}={v}" for k, v in thread_env(threads).items())] if threads else []
    if gpus <= 1:
        return [*pinned, "python", "-m", f"{package}.train", *overrides]
    launch = ["python", "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={gpus}"]
    return [*launch, "-m", f"{package}.train", *overrides]


def azureml_distribution(nodes: int) -> dict[str, Any]:
    """Azure ML's `distribution` of a job over `nodes`: one process a node, given MASTER_ADDR,
    NODE_RANK and WORLD_SIZE, which launch.py turns into torchrun over the node's GPUs."""
    del nodes
    return {"type": "pytorch", "process_count_per_instance": 1}
