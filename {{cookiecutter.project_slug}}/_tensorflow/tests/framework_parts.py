"""The shared tests' view of this framework: how a config's parts are built."""

from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from {{ cookiecutter.package_name }}.training.loop import build_optimizer


def build(cfg: DictConfig) -> None:
    """Instantiate the model, optimizer and schedule exactly as the trainer does."""
    instantiate(cfg.model, input_shape=(1, 8, 8), num_classes=10)
    settings = OmegaConf.to_object(cfg.trainer)
    build_optimizer(instantiate(cfg.optimizer), instantiate(cfg.scheduler), 100, settings)
