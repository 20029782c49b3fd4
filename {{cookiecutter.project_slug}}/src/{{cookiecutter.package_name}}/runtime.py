"""Where and how this process runs: device, seeds, determinism and torchrun's process group."""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from .schema import Device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Runtime:
    """This process's place in the job: one process, or one rank of a torchrun job."""

    device: torch.device
    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Only the main process logs, writes checkpoints and writes outputs."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(choice: str | Device, local_rank: int = 0) -> torch.device:
    """`auto` prefers CUDA, then Apple's MPS, then the CPU."""
    name = Device(choice).value
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif torch.backends.mps.is_available():
            name = "mps"
        else:
            name = "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise ValueError("trainer.device=cuda but no CUDA GPU is visible")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device(name)


def process_rank() -> int:
    """This process's rank as torchrun set it (0 when run on its own), before any setup."""
    return int(os.environ.get("RANK", "0"))


def start(device_name: str) -> Runtime:
    """Join torchrun's process group when launched by torchrun; otherwise run as one process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_name, local_rank)
    if world_size == 1:
        return Runtime(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    runtime = Runtime(device, rank=dist.get_rank(), world_size=dist.get_world_size())
    log.info("DDP: rank %d of %d on %s (%s)", runtime.rank, world_size, device, backend)
    return runtime


def stop(runtime: Runtime) -> None:
    if runtime.distributed and dist.is_initialized():
        dist.destroy_process_group()


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed Python, NumPy and torch; in deterministic mode also pin kernels that have a choice."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        # cuBLAS needs a fixed workspace to be deterministic; set before the first CUDA call.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    else:
        torch.backends.cudnn.benchmark = True


def rng_state() -> dict:
    """Every random generator's state, to store in a checkpoint."""
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def broadcast(value: object, runtime: Runtime) -> object:
    """Rank 0's value on every rank (for example the run directory)."""
    if not runtime.distributed:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def any_rank(flag: bool, runtime: Runtime) -> bool:
    """True on every rank if it is true on any rank (so all ranks stop at the same step)."""
    if not runtime.distributed:
        return flag
    tensor = torch.tensor([int(flag)], device=runtime.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())
