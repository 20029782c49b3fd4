"""The shared tests' view of this framework: how a config's parts are built."""

from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import DictConfig


def build(cfg: DictConfig) -> None:
    """Instantiate the model, optimizer and scheduler exactly as the loop does."""
    model = instantiate(cfg.model, input_shape=(1, 8, 8), num_classes=10)
    optimizer = instantiate(cfg.optimizer)(model.parameters())
    instantiate(cfg.scheduler)(optimizer, total_steps=100)
