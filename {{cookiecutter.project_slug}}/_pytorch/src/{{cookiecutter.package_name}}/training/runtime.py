"""Where and how this process runs: device, precision, seeds, determinism and torchrun's
process group."""

from __future__ import annotations

import inspect
import logging
import os
import random
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ..config.schema import Device, Precision

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


def gpu_count() -> int:
    """The CUDA GPUs this process sees (CUDA_VISIBLE_DEVICES applied)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def autocast_dtype(choice: str | Precision, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `trainer.precision`; None means full fp32. `mixed` on CUDA is
    bf16 from compute capability 8.0 (Ampere) on, where tensor cores run it, else fp16:
    `torch.cuda.is_bf16_supported()` also says yes where bf16 is only emulated (a T4, a V100)."""
    precision = Precision(choice).value
    if precision == "mixed":
        if device.type == "cuda":
            precision = "bf16" if torch.cuda.get_device_capability(device) >= (8, 0) else "fp16"
        else:
            precision = "fp16" if device.type == "mps" else "bf16"
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def precision_name(dtype: torch.dtype | None, device: torch.device, tf32: bool) -> str:
    """What a run trains in, for metrics.json, `trainer.tf32` applied: fp32 matmuls and
    convolutions in TensorFloat-32 on CUDA (tensor cores from Ampere on run them at several times
    the fp32 rate with a 10-bit mantissa; off, in full fp32)."""
    if device.type == "cuda":
        mode = "tf32" if tf32 else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode  # type: ignore[attr-defined]
    named = {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]
    return "tf32" if named == "fp32" and tf32 and device.type == "cuda" else named


def autocast(device: torch.device, dtype: torch.dtype | None) -> AbstractContextManager:
    """Autocast to `dtype`; with None, nothing (cheaper than a disabled autocast every step)."""
    return nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def memory_format(model: nn.Module, device: torch.device) -> torch.memory_format:
    """channels_last for a convolutional model on CUDA: cuDNN's convolutions run on NHWC
    tensors natively (tensor cores included) and put a transpose around each one given NCHW."""
    convolutional = any(isinstance(module, nn.Conv2d) for module in model.modules())
    if device.type == "cuda" and convolutional:
        return torch.channels_last
    return torch.contiguous_format


def compiled(net: nn.Module) -> nn.Module:
    """torch.compile with static shapes: one graph per batch shape (the epoch's short last batch
    adds one). By default a second shape recompiles into a shape-generic graph that every later
    full batch then runs, slower than the graph made for its size."""
    return torch.compile(net, dynamic=False)  # type: ignore[return-value]


def wrap(model: nn.Module, runtime: Runtime, compile_model: bool) -> nn.Module:
    """What training steps run through: `model` under DDP in a job of several processes, and
    compiled when asked. State dicts still come from the plain `model`."""
    net = model
    if runtime.distributed:
        device_ids = [runtime.device.index] if runtime.device.type == "cuda" else None
        net = DistributedDataParallel(net, device_ids=device_ids)
    return compiled(net) if compile_model else net


def make_optimizer(
    make: Callable[..., torch.optim.Optimizer],
    params: Iterable[nn.Parameter],
    device: torch.device,
) -> torch.optim.Optimizer:
    """The configured optimizer, with its fused kernel on a GPU where it has one (AdamW, Adam,
    SGD: one kernel per step for every parameter, instead of several per tensor), unless the
    config chooses (`+optimizer.fused=false`)."""
    target = getattr(make, "func", make)  # Hydra's _partial_: a functools.partial of the class
    try:
        takes_fused = "fused" in inspect.signature(target).parameters
    except (TypeError, ValueError):
        takes_fused = False
    if device.type == "cuda" and takes_fused and "fused" not in getattr(make, "keywords", {}):
        return make(params, fused=True)
    return make(params)


def process_rank() -> int:
    """This process's rank as torchrun set it (0 when run on its own), before any setup."""
    return int(os.environ.get("RANK", "0"))


def start(device: str) -> Runtime:
    """Join torchrun's process group when launched by torchrun; otherwise run as one process."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    chosen = pick_device(device, local_rank)
    if world_size == 1:
        return Runtime(chosen)
    backend = "nccl" if chosen.type == "cuda" else "gloo"
    # device_id binds NCCL's communicator to this rank's GPU now, not at the first collective.
    dist.init_process_group(backend=backend, device_id=chosen if chosen.type == "cuda" else None)
    runtime = Runtime(chosen, rank=dist.get_rank(), world_size=dist.get_world_size())
    log.info("DDP: rank %d of %d on %s (%s)", runtime.rank, world_size, chosen, backend)
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
    """Every random generator's state, to store in a checkpoint: plain values and CPU tensors,
    which torch.load(weights_only=True) reads back (NumPy's key as a list, not an array)."""
    name, key, position, has_gauss, gauss = np.random.get_state(legacy=True)
    state = {
        "python": random.getstate(),
        "numpy": (name, np.asarray(key).tolist(), position, has_gauss, gauss),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Put back the generators of `state` (as loaded: on the CPU). A checkpoint written with N
    visible GPUs restores the first min(N, M) of this process's M, and says what it could not."""
    random.setstate(state["python"])
    name, key, *rest = state["numpy"]
    np.random.set_state((name, np.asarray(key, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    saved = state.get("cuda") or []
    here = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for index, generator in enumerate(saved[:here]):
        torch.cuda.set_rng_state(generator, index)
    if len(saved) != here:
        log.info(
            "resume: %d GPU random generators saved, %d here: %s",
            len(saved), here,
            f"GPUs {len(saved)}..{here - 1} start from their seeds" if here > len(saved)
            else f"the states of GPUs {here}..{len(saved) - 1} are not restored",
        )  # fmt: skip


def broadcast(path: str | Path | None, runtime: Runtime) -> Path | None:
    """Rank 0's path (or None) on every rank: the run directory, the checkpoint to resume."""
    box = [None if path is None else str(path)]
    if runtime.distributed:
        dist.broadcast_object_list(box, src=0)
    return None if box[0] is None else Path(box[0])


class StopVote:
    """Whether any rank was asked to stop, agreed on without making the host wait for the GPU.

    One process reads its own flag every step. Under DDP, every `every` steps each rank starts a
    non-blocking all-reduce of its flag over a CPU (gloo) group and reads the one it started
    `every` steps before, long finished: all ranks read the same votes at the same step, so they
    stop together, at most 2 x `every` steps after the signal.
    """

    def __init__(self, runtime: Runtime, every: int) -> None:
        self.every = every
        # Its own CPU group: a flag on the GPU would make `.item()` wait for every queued step.
        self._group = dist.new_group(backend="gloo") if runtime.distributed else None
        self._pending: tuple[Any, torch.Tensor] | None = None

    def __call__(self, flag: bool, step: int) -> bool:
        if self._group is None:
            return flag
        if step % self.every:
            return False
        agreed = False
        if self._pending is not None:
            work, vote = self._pending
            work.wait()
            agreed = bool(vote.item())
        self._pending = None
        if not agreed:
            vote = torch.tensor([int(flag)], dtype=torch.int32)
            work = dist.all_reduce(vote, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
            self._pending = (work, vote)
        return agreed

    def close(self) -> None:
        """Finish the vote in flight (every rank has one, from the same step)."""
        if self._pending is not None:
            self._pending[0].wait()
            self._pending = None
