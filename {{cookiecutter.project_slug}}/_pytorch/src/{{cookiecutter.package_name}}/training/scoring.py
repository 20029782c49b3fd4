"""Scoring a PyTorch classifier, and a trained one rebuilt from its checkpoint (for evaluate.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data.batches import make_loader
from ..data.splits import AnySplit
from ..tracking.trackers import as_metrics
from .runtime import Runtime, pick_device


@torch.no_grad()
def score(
    model: nn.Module,
    loader: Any,
    device: torch.device,
    amp_dtype: torch.dtype | None = None,
    limit_batches: int | None = None,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """Summed cross-entropy, correct predictions and sample count, as one float64 tensor."""
    model.eval()
    totals = torch.zeros(3, device=device, dtype=torch.float64)
    for index, (x, y) in enumerate(loader):
        if limit_batches and index >= limit_batches:
            break
        x = x.to(device, non_blocking=True, memory_format=memory_format)
        y = y.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(x).float()
        totals[0] += nn.functional.cross_entropy(logits, y, reduction="sum")
        totals[1] += (logits.argmax(1) == y).sum()
        totals[2] += len(y)
    return totals


def score_split(
    model: nn.Module,
    split: AnySplit,
    batch_size: int,
    runtime: Runtime,
    amp_dtype: torch.dtype | None = None,
    limit_batches: int | None = None,
    shard: bool = True,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """`score` over `split`. With `shard` (under DDP every rank must call it) each rank scores its
    share and the sums are combined exactly; without, this process scores it all alone."""
    shard = shard and runtime.distributed
    loader = make_loader(
        split,
        batch_size,
        shuffle=False,
        rank=runtime.rank if shard else 0,
        world_size=runtime.world_size if shard else 1,
        even=False,
    )
    return score_shares(model, loader, runtime, shard, amp_dtype, limit_batches, memory_format)


def score_shares(
    model: nn.Module,
    loader: Any,
    runtime: Runtime,
    shard: bool,
    amp_dtype: torch.dtype | None = None,
    limit_batches: int | None = None,
    memory_format: torch.memory_format = torch.contiguous_format,
) -> torch.Tensor:
    """`score` over this process's loader; with `shard` (every rank must call), the ranks' sums
    combined exactly."""
    totals = score(model, loader, runtime.device, amp_dtype, limit_batches, memory_format)
    if shard:
        torch.distributed.all_reduce(totals)
    return totals


def load_trained(model_config: Any, path: Path, state: dict, device: str) -> nn.Module:
    """The model a checkpoint holds, rebuilt from its config (for evaluation)."""
    from hydra.utils import instantiate

    model = instantiate(
        model_config, input_shape=tuple(state["input_shape"]), num_classes=state["num_classes"]
    )
    model.load_state_dict(state["model"])
    return model.to(pick_device(device))


def evaluate_split(model: nn.Module, split: AnySplit, batch_size: int, prefix: str) -> dict:
    """Mean loss and accuracy of `model` over `split`, in this process alone."""
    device = next(model.parameters()).device
    loader = make_loader(split, batch_size, shuffle=False)
    return as_metrics(score(model, loader, device).tolist(), prefix)
