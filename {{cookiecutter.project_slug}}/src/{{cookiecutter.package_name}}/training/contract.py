"""What the entry points (train.py, evaluate.py, crossval.py) need from a framework, written once.

A framework is the set of modules its overlay of the template provides: `loop.Trainer`,
`runtime`, `checkpoint` and `scoring`. Everything else under src/ is shared between the
frameworks and talks to the framework only through what this file names.
`tests/test_contract.py` checks it in every project; mypy checks the modules against these
protocols (`invoke lint`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..config.schema import CallbacksConfig, DataConfig, TrainerConfig
from ..data.splits import AnySplit, Splits
from ..tracking.trackers import Tracker
from .signals import GracefulStop


@dataclass(frozen=True)
class TrainerParts:
    """What a Trainer is built from, read from the config once by fit.py."""

    make_model: Callable[[], Any]  # the model config's class, input shape and classes bound
    make_optimizer: Callable[..., Any]  # configs/optimizer/: a class with its arguments bound
    make_scheduler: Callable[..., Any]  # configs/scheduler/: called with the run's total steps
    trainer: TrainerConfig
    callbacks: CallbacksConfig
    data: DataConfig
    seed: int
    extra_state: dict[str, Any]  # saved in every checkpoint: the config and the data's shape


@runtime_checkable
class Runtime(Protocol):
    """This process's place in the job."""

    @property
    def rank(self) -> int: ...
    @property
    def is_main(self) -> bool: ...
    @property
    def distributed(self) -> bool: ...


@runtime_checkable
class Trainer(Protocol):
    """`loop.Trainer(parts, runtime, tracker, checkpoint_dir)`."""

    @property
    def parameter_count(self) -> int: ...
    @property
    def epochs_done(self) -> int: ...
    @property
    def ran_on(self) -> dict[str, str | int]:
        """The device, the precision and the CPU threads it trains with, as metrics.json
        records them."""
        ...

    def fit(self, splits: Splits, stop: GracefulStop, resume_from: Path | None) -> dict[str, Any]:
        """Train until max_epochs or early stopping; the best validation metrics and epoch."""
        ...

    def test(self, split: AnySplit) -> dict[str, float]:
        """`test/loss` and `test/accuracy` over `split`, in this process alone."""
        ...

    def load_best_weights(self) -> None:
        """Put the best checkpoint's weights into the model."""
        ...


TrainerClass = Callable[[TrainerParts, Any, Tracker, Path], Trainer]


class RuntimeModule(Protocol):
    """`runtime`: devices, seeds, and the processes of a multi-process job."""

    def start(self, device: str) -> Any: ...
    def stop(self, runtime: Any) -> None: ...
    def broadcast(self, path: str | Path | None, runtime: Any) -> Path | None: ...
    def seed_everything(self, seed: int, deterministic: bool) -> None: ...
    def process_rank(self) -> int: ...
    def gpu_count(self) -> int: ...


class CheckpointModule(Protocol):
    """`checkpoint`: the two checkpoint names and how to read a checkpoint's saved state."""

    LAST: str
    BEST: str

    def load(self, path: Path) -> dict[str, Any]: ...


class ScoringModule(Protocol):
    """`scoring`: a trained model back from its checkpoint, and its score on a split."""

    def load_trained(self, model_config: Any, path: Path, state: dict, device: str) -> Any: ...
    def evaluate_split(
        self, model: Any, split: AnySplit, batch_size: int, prefix: str
    ) -> dict[str, float]: ...
