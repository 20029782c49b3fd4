"""The PyTorch training loop: epochs of optimizer steps, validation, checkpoints and resume.

Everything a run needs to continue exactly where it stopped (model, optimizer, scheduler, gradient
scaler, position in the epoch, monitors, RNG states) goes into `checkpoints/last.pt`, after every
epoch and whenever a stop signal arrives.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from . import checkpoint
from .data import Split, Splits
from .monitor import EarlyStopping, MetricMonitor
from .outputs import as_metrics
from .runtime import Runtime, any_rank, pick_device, rng_state, set_rng_state
from .sampling import epoch_sampler, make_loader
from .schema import CallbacksConfig, Mode, Precision, TrainerConfig
from .signals import GracefulStop, StopRequested
from .tracking import Tracker

log = logging.getLogger(__name__)


@dataclass
class Progress:
    """Where training stands; part of every checkpoint."""

    epoch: int = 0  # epochs completed
    batches_done: int = 0  # batches consumed in the current epoch, for a mid-epoch resume
    global_step: int = 0  # optimizer steps taken
    loss_sum: float = 0.0  # train loss summed over the current epoch's samples
    samples: int = 0
    stopped_early: bool = False  # a re-run of a stopped run only re-tests


@torch.no_grad()
def score(
    model: nn.Module,
    loader: object,
    device: torch.device,
    amp_dtype: torch.dtype | None = None,
    limit_batches: int | None = None,
) -> torch.Tensor:
    """Summed cross-entropy, correct predictions and sample count, as one float64 tensor."""
    model.eval()
    totals = torch.zeros(3, device=device, dtype=torch.float64)
    for index, (x, y) in enumerate(loader):
        if limit_batches and index >= limit_batches:
            break
        x, y = x.to(device), y.to(device)
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            logits = model(x).float()
        totals[0] += nn.functional.cross_entropy(logits, y, reduction="sum")
        totals[1] += (logits.argmax(1) == y).sum()
        totals[2] += len(y)
    return totals


def load_trained(model_config: object, path: Path, state: dict, device: str) -> nn.Module:
    """The model a checkpoint holds, rebuilt from its config (for evaluation)."""
    from hydra.utils import instantiate

    model = instantiate(
        model_config, input_shape=tuple(state["input_shape"]), num_classes=state["num_classes"]
    )
    model.load_state_dict(state["model"])
    return model.to(pick_device(device))


def evaluate_split(model: nn.Module, split: Split, batch_size: int, prefix: str) -> dict:
    """Mean loss and accuracy of `model` over `split`, in this process alone."""
    device = next(model.parameters()).device
    loader = make_loader(split, batch_size, shuffle=False)
    return as_metrics(score(model, loader, device).tolist(), prefix)


def autocast_dtype(choice: str | Precision, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for `trainer.precision`; None means full fp32."""
    precision = Precision(choice).value
    if precision == "mixed":
        if device.type == "cuda":
            precision = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            precision = "fp16" if device.type == "mps" else "bf16"
    return {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


class Trainer:
    """Fits a classifier with cross-entropy. `settings` and `callbacks` are `cfg.trainer` and
    `cfg.callbacks` as plain dataclasses (OmegaConf.to_object: attribute reads in the hot loop
    stay cheap); `extra_state` (config, data shape) goes into every checkpoint."""

    def __init__(
        self,
        make_model: Callable[[], nn.Module],
        make_optimizer: Callable[..., torch.optim.Optimizer],
        make_scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler],
        settings: TrainerConfig,
        callbacks: CallbacksConfig,
        runtime: Runtime,
        tracker: Tracker,
        checkpoint_dir: Path,
        batch_size: int,
        seed: int,
        num_workers: int = 0,
        extra_state: dict | None = None,
    ) -> None:
        self.settings, self.runtime, self.tracker = settings, runtime, tracker
        self.checkpoint_dir = checkpoint_dir
        self.batch_size, self.seed, self.num_workers = batch_size, seed, num_workers
        self.extra_state = extra_state or {}
        self.device = runtime.device
        self.model = make_model().to(self.device)  # the plain module: state dicts come from here
        self.net = self._wrap(self.model)  # what training forward passes go through
        self.optimizer = make_optimizer(self.model.parameters())
        self.make_scheduler = make_scheduler
        self.scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
        self.amp_dtype = autocast_dtype(settings.precision, self.device)
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.amp_dtype == torch.float16
        )
        ckpt = callbacks.checkpoint
        self.best = MetricMonitor(ckpt.monitor, Mode(ckpt.mode).value)
        self.best_val: dict[str, float] = {}  # all validation metrics of the best epoch
        self.mirror_uri = ckpt.mirror_uri
        self.save_every_n_steps = ckpt.every_n_steps
        self.min_save_interval_s = ckpt.min_interval_s
        self._saved_at = 0.0  # time.monotonic() of the last write
        self._unsaved_best: dict | None = None  # best.pt content not yet written
        stopping = callbacks.early_stopping
        self.early_stopping = (
            EarlyStopping(
                MetricMonitor(stopping.monitor, Mode(stopping.mode).value, stopping.min_delta),
                stopping.patience,
            )
            if stopping
            else None
        )
        self.progress = Progress()
        self.saver = checkpoint.BackgroundSaver()
        self._epoch_loss = torch.zeros((), device=self.device)  # progress.loss_sum, kept on device
        self.loss_fn = nn.CrossEntropyLoss()

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def _wrap(self, model: nn.Module) -> nn.Module:
        net = model
        if self.runtime.distributed:
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            net = DistributedDataParallel(net, device_ids=device_ids)
        if self.settings.compile:
            net = torch.compile(net)
        return net

    def _autocast(self) -> torch.autocast | nullcontext:
        if self.amp_dtype is None:  # cheaper than a disabled autocast, once per step
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    # ---- training -------------------------------------------------------------------------

    def fit(self, splits: Splits, stop: GracefulStop, resume_from: Path | None = None) -> dict:
        """Train until max_epochs or early stopping; returns the best validation metrics."""
        s = self.settings
        train_loader = make_loader(
            splits.train,
            self.batch_size,
            shuffle=True,
            seed=self.seed,
            rank=self.runtime.rank,
            world_size=self.runtime.world_size,
            num_workers=self.num_workers,
            pin_memory=self.device.type == "cuda",
        )
        sampler = epoch_sampler(train_loader)
        batches_per_epoch = math.ceil(sampler.per_rank / self.batch_size)
        if s.limit_train_batches:
            batches_per_epoch = min(batches_per_epoch, s.limit_train_batches)
        steps_per_epoch = math.ceil(batches_per_epoch / s.accumulate_grad_batches)
        self.scheduler = self.make_scheduler(
            self.optimizer, total_steps=steps_per_epoch * s.max_epochs
        )
        if resume_from is not None:
            self._restore(resume_from)
        self._saved_at = time.monotonic()

        while not self.progress.stopped_early and self.progress.epoch < s.max_epochs:
            started = time.perf_counter()
            train_loss = self._train_epoch(train_loader, batches_per_epoch, stop)
            val = self.evaluate(splits.val, "val", s.limit_eval_batches)
            self.progress.epoch += 1
            improved = self.best.update(val, self.progress.epoch)
            if self.early_stopping is not None:
                self.early_stopping.monitor.update(val, self.progress.epoch)
            self.progress.stopped_early = (
                self.early_stopping is not None and self.early_stopping.should_stop
            )
            epoch_metrics = {"train/epoch_loss": train_loss, **val, "epoch": self.progress.epoch}
            self.tracker.log(epoch_metrics, step=self.progress.global_step)
            if improved:
                self.best_val = val
                self._remember_best(val)
            finished = self.progress.stopped_early or self.progress.epoch >= s.max_epochs
            if finished or time.monotonic() - self._saved_at >= self.min_save_interval_s:
                self._save()
            self._log_epoch(epoch_metrics, time.perf_counter() - started)
            if self.progress.stopped_early:
                log.info(
                    "early stopping: %s has not improved for %d epochs",
                    self.early_stopping.monitor.metric,
                    self.early_stopping.patience,
                )
        self.saver.close()
        return {**self.best_val, "best_epoch": self.best.best_epoch}

    def _train_epoch(self, loader: object, batches_per_epoch: int, stop: GracefulStop) -> float:
        s, progress = self.settings, self.progress
        sampler = epoch_sampler(loader)
        sampler.set_epoch(progress.epoch, skip=progress.batches_done * self.batch_size)
        self._epoch_loss.fill_(progress.loss_sum)  # non-zero when resuming mid-epoch
        self.net.train()
        bar = tqdm(
            total=batches_per_epoch,
            initial=progress.batches_done,
            desc=f"epoch {progress.epoch + 1}/{s.max_epochs}",
            disable=not self._show_bar,
            leave=False,
        )
        for x, y in loader:
            if progress.batches_done >= batches_per_epoch:
                break
            x = x.to(self.device, non_blocking=True)
            y = y.to(self.device, non_blocking=True)
            progress.batches_done += 1
            at_boundary = (
                progress.batches_done % s.accumulate_grad_batches == 0
                or progress.batches_done == batches_per_epoch
            )
            # Under DDP, only the last micro-batch of an accumulation syncs gradients.
            sync = (
                nullcontext() if at_boundary or not self.runtime.distributed else self.net.no_sync()
            )
            with sync:
                with self._autocast():
                    loss = self.loss_fn(self.net(x), y)
                scaled = loss / s.accumulate_grad_batches if s.accumulate_grad_batches > 1 else loss
                self.scaler.scale(scaled).backward()
            self._epoch_loss.add_(loss.detach(), alpha=len(y))
            progress.samples += len(y)
            bar.update()
            if at_boundary:
                self._optimizer_step()
                self._after_step(loss, stop)
        bar.close()
        mean_loss = float(self._epoch_loss) / max(1, progress.samples)
        progress.batches_done, progress.loss_sum, progress.samples = 0, 0.0, 0
        self._epoch_loss.zero_()
        return mean_loss

    def _optimizer_step(self) -> None:
        if self.settings.gradient_clip_norm:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.settings.gradient_clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.progress.global_step += 1

    def _after_step(self, loss: torch.Tensor, stop: GracefulStop) -> None:
        """Bookkeeping at an optimizer-step boundary: logs, periodic saves, stop requests."""
        progress = self.progress
        if progress.global_step % self.settings.log_every_n_steps == 0:
            self.tracker.log(
                {"train/loss": float(loss.detach()), "train/lr": self.scheduler.get_last_lr()[0]},
                step=progress.global_step,
            )
        if self.save_every_n_steps and progress.global_step % self.save_every_n_steps == 0:
            self._save()
        if any_rank(stop.requested, self.runtime):
            self._save()
            self.saver.close()
            raise StopRequested(stop.signum or signal.SIGTERM)

    @property
    def _show_bar(self) -> bool:
        setting = self.settings.progress_bar
        on = sys.stderr.isatty() if setting is None else setting
        return on and self.runtime.is_main

    def _log_epoch(self, metrics: dict, seconds: float) -> None:
        shown = "  ".join(
            f"{key} {value:.4f}" for key, value in metrics.items() if isinstance(value, float)
        )
        log.info(
            "epoch %d/%d  %s  lr %.2e  (%.1fs)",
            self.progress.epoch,
            self.settings.max_epochs,
            shown,
            self.scheduler.get_last_lr()[0],
            seconds,
        )

    # ---- evaluation -----------------------------------------------------------------------

    def evaluate(
        self, split: Split, prefix: str, limit_batches: int | None = None, shard: bool = True
    ) -> dict[str, float]:
        """Mean loss and accuracy over `split`.

        With `shard` (the default) every rank must call this: each takes its share and the sums
        are combined exactly. `shard=False` evaluates everything in this process alone.
        """
        shard = shard and self.runtime.distributed
        loader = make_loader(
            split,
            self.batch_size,
            shuffle=False,
            rank=self.runtime.rank if shard else 0,
            world_size=self.runtime.world_size if shard else 1,
            even=False,
        )
        totals = score(self.model, loader, self.device, self.amp_dtype, limit_batches)
        if shard:
            torch.distributed.all_reduce(totals)
        return as_metrics(totals.tolist(), prefix)

    # ---- checkpoints ----------------------------------------------------------------------

    def _save(self) -> None:
        """Write best.pt (if the best changed since the last write), then last.pt.

        In that order, so a crash between the two never leaves last.pt ahead of best.pt.
        """
        if not self.runtime.is_main:
            return
        if self._unsaved_best is not None:
            self.saver.save(
                self._unsaved_best, self.checkpoint_dir / checkpoint.BEST, self.mirror_uri
            )
            self._unsaved_best = None
        self.progress.loss_sum = float(self._epoch_loss)
        state = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "progress": asdict(self.progress),
            "best": self.best.state_dict(),
            "best_val": self.best_val,
            "early_stopping": self.early_stopping.monitor.state_dict()
            if self.early_stopping
            else None,
            "rng": rng_state(),
            **self.extra_state,
        }
        self.saver.save(state, self.checkpoint_dir / checkpoint.LAST, self.mirror_uri)
        self._saved_at = time.monotonic()

    def _remember_best(self, val_metrics: dict) -> None:
        """Keep a CPU copy of the new best weights until the next write."""
        if not self.runtime.is_main:
            return
        self._unsaved_best = {
            "model": checkpoint.cpu_copy(self.model.state_dict()),
            "metrics": val_metrics,
            "epoch": self.progress.epoch,
            **self.extra_state,
        }

    def _restore(self, path: Path) -> None:
        state = checkpoint.load(path, map_location=self.device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.progress = Progress(**state["progress"])
        self.best.load_state_dict(state["best"])
        self.best_val = state["best_val"]
        if self.early_stopping is not None and state["early_stopping"] is not None:
            self.early_stopping.monitor.load_state_dict(state["early_stopping"])
        set_rng_state(state["rng"])
        log.info(
            "resumed from %s: epoch %d, batch %d, step %d",
            path,
            self.progress.epoch,
            self.progress.batches_done,
            self.progress.global_step,
        )

    def test(self, split: Split) -> dict[str, float]:
        """Mean loss and accuracy over `split`, in this process alone (the main one)."""
        return self.evaluate(split, "test", shard=False)

    def load_best_weights(self) -> dict:
        """Put the best checkpoint's weights into the model (for the final test)."""
        self.saver.wait()
        state = checkpoint.load(self.checkpoint_dir / checkpoint.BEST, map_location=self.device)
        self.model.load_state_dict(state["model"])
        return state
