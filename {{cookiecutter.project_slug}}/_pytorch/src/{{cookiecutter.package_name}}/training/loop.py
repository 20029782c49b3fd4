"""The PyTorch training loop: epochs of optimizer steps, validation, checkpoints and resume.

Everything a run needs to continue exactly where it stopped (model, optimizer, scheduler, gradient
scaler, position in the epoch, monitors, RNG states) goes into `checkpoints/last.pt`, after every
epoch and whenever a stop signal arrives.
"""

from __future__ import annotations

import math
import signal
import time
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from ..data.batches import epoch_sampler, run_loaders
from ..data.sources import readers
from ..data.splits import AnySplit, Splits
from ..tracking.trackers import Tracker, as_metrics
from . import checkpoint, outputs
from .contract import TrainerParts
from .early_stopping import EarlyStopping, MetricMonitor
from .runtime import (
    Runtime,
    StopVote,
    autocast,
    autocast_dtype,
    compiled,
    make_optimizer,
    memory_format,
    precision_name,
    rng_state,
    set_rng_state,
    wrap,
)
from .scoring import score_shares, score_split
from .signals import GracefulStop, StopRequested


class Trainer:
    """Fits a classifier with cross-entropy (the framework contract: contract.py)."""

    def __init__(
        self, parts: TrainerParts, runtime: Runtime, tracker: Tracker, checkpoint_dir: Path
    ) -> None:
        self.settings, self.data = parts.trainer, parts.data
        self.runtime, self.tracker, self.seed = runtime, tracker, parts.seed
        self.device = runtime.device
        self.model = parts.make_model().to(self.device)  # the plain module: state dicts from here
        self.memory_format = memory_format(self.model, self.device)
        self.model.to(memory_format=self.memory_format)
        self.net = wrap(self.model, runtime, self.settings.compile)  # what training steps run
        # Validation runs the plain model, compiled as training is: under DDP each forward would
        # broadcast buffers, and ranks score different numbers of batches.
        self.eval_net = compiled(self.model) if self.settings.compile else self.model
        self._params = list(self.model.parameters())  # the optimizer's, and clipped every step
        self.optimizer = make_optimizer(parts.make_optimizer, self._params, self.device)
        self.make_scheduler = parts.make_scheduler
        self.scheduler: torch.optim.lr_scheduler.LRScheduler | None = None
        self.amp_dtype = autocast_dtype(self.settings.precision, self.device)
        self.precision = precision_name(self.amp_dtype, self.device, self.settings.tf32)
        self.scaler = torch.amp.GradScaler(
            self.device.type, enabled=self.amp_dtype == torch.float16
        )
        ckpt = parts.callbacks.checkpoint
        self.live = tracker.live  # Prometheus counters, or nothing (monitoring=none)
        self.checkpoints = checkpoint.Checkpoints(
            checkpoint_dir, ckpt, runtime.is_main, parts.extra_state, self.live.checkpoint_saved
        )
        self.best = MetricMonitor(ckpt.monitor, ckpt.mode)
        self.best_val: dict[str, float] = {}  # all validation metrics of the best epoch
        self.early_stopping = EarlyStopping.configured(parts.callbacks.early_stopping)
        self.progress = checkpoint.Progress()
        self.stop_vote = StopVote(runtime, self.settings.stop_check_every_n_steps)
        self._epoch_loss = torch.zeros((), device=self.device)  # progress.loss_sum, kept on device
        # A logged step's loss, read on the host at the next log point, when the GPU is long
        # past it: reading it at once would drain the GPU's queue every N steps.
        self._logged: tuple[int, torch.Tensor, float] | None = None
        self.loss_fn = nn.CrossEntropyLoss()

    @property
    def ran_on(self) -> dict[str, str | int]:
        """Where and how the run trained, for metrics.json: device, precision, CPU threads."""
        threads = torch.get_num_threads()  # OMP_NUM_THREADS where set, else the cores it sees
        return {"device": str(self.device), "precision": self.precision, "threads": threads}

    @property
    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def epochs_done(self) -> int:
        return self.progress.epoch

    # ---- training -------------------------------------------------------------------------

    def fit(self, splits: Splits, stop: GracefulStop, resume_from: Path | None = None) -> dict:
        """Train until max_epochs or early stopping; returns the best validation metrics."""
        s = self.settings
        train_loader, val_loader = run_loaders(
            splits, self.data.batch_size, self.seed, self.runtime.rank, self.runtime.world_size,
            readers(self.data.num_workers), pin_memory=self.device.type == "cuda",
        )  # fmt: skip
        sampler = epoch_sampler(train_loader)
        batches_per_epoch = math.ceil(sampler.per_rank / self.data.batch_size)
        if s.limit_train_batches:
            batches_per_epoch = min(batches_per_epoch, s.limit_train_batches)
        steps_per_epoch = math.ceil(batches_per_epoch / s.accumulate_grad_batches)
        self.scheduler = self.make_scheduler(
            self.optimizer, total_steps=steps_per_epoch * s.max_epochs
        )
        if resume_from is not None:
            self._restore(resume_from)
        self.checkpoints.restarted()

        while not self.progress.stopped_early and self.progress.epoch < s.max_epochs:
            started = time.perf_counter()
            train_loss = self._train_epoch(train_loader, batches_per_epoch, stop)
            val = self.evaluate(val_loader, "val", s.limit_eval_batches)
            self._end_epoch(train_loss, val, time.perf_counter() - started)
        self.stop_vote.close()
        self.checkpoints.close()
        return {**self.best_val, "best_epoch": self.best.best_epoch}

    def _end_epoch(self, train_loss: float, val: dict[str, float], seconds: float) -> None:
        """After an epoch's validation: best, early stopping, metrics, a save when due."""
        progress = self.progress
        progress.epoch += 1
        improved = self.best.update(val, progress.epoch)
        if self.early_stopping is not None:
            self.early_stopping.monitor.update(val, progress.epoch)
            progress.stopped_early = self.early_stopping.should_stop
        metrics = {"train/epoch_loss": train_loss, **val, "epoch": progress.epoch}
        self.tracker.log(metrics, step=progress.global_step)
        if improved:
            self.best_val = val
            self.checkpoints.keep_best(self.model.state_dict(), val, progress.epoch)
        finished = progress.stopped_early or progress.epoch >= self.settings.max_epochs
        if self.checkpoints.due_after_epoch(finished):
            self._save()
        outputs.log_epoch(progress.epoch, self.settings.max_epochs, metrics, self._lr(), seconds)
        if progress.stopped_early and self.early_stopping is not None:
            outputs.log_early_stop(self.early_stopping.monitor.metric, self.early_stopping.patience)

    def _train_epoch(self, loader: Any, batches_per_epoch: int, stop: GracefulStop) -> float:
        s, progress = self.settings, self.progress
        sampler = epoch_sampler(loader)
        sampler.set_epoch(progress.epoch, skip=progress.batches_done * self.data.batch_size)
        self._epoch_loss.fill_(progress.loss_sum)  # non-zero when resuming mid-epoch
        self.net.train()
        self.live.epoch_started()
        bar = tqdm(
            total=batches_per_epoch,
            initial=progress.batches_done,
            desc=f"epoch {progress.epoch + 1}/{s.max_epochs}",
            disable=not outputs.show_progress_bar(s.progress_bar, self.runtime.is_main),
            leave=False,
        )
        for x, y in loader:
            if progress.batches_done >= batches_per_epoch:
                break
            self._train_step(x, y, batches_per_epoch, stop)
            bar.update()
        bar.close()
        self._log_loss()  # before the epoch's metrics, whose step is later
        mean_loss = float(self._epoch_loss) / max(1, progress.samples)
        progress.batches_done, progress.loss_sum, progress.samples = 0, 0.0, 0
        self._epoch_loss.zero_()
        return mean_loss

    def _train_step(
        self, x: torch.Tensor, y: torch.Tensor, batches_per_epoch: int, stop: GracefulStop
    ) -> None:
        """One batch: forward, backward and, at an accumulation boundary, the optimizer step.

        Nothing here waits for the GPU (tests/test_gpu.py runs it under CUDA's sync check): the
        loss stays on the device, and only logging every N steps and checkpoints read it.
        """
        s, progress = self.settings, self.progress
        x = x.to(self.device, non_blocking=True, memory_format=self.memory_format)
        y = y.to(self.device, non_blocking=True)
        progress.batches_done += 1
        at_boundary = (
            progress.batches_done % s.accumulate_grad_batches == 0
            or progress.batches_done == batches_per_epoch
        )
        # Under DDP, only the last micro-batch of an accumulation syncs gradients.
        sync = (
            nullcontext() if at_boundary or not self.runtime.distributed else self.net.no_sync()  # type: ignore[operator]  # a DistributedDataParallel
        )
        with sync:
            with autocast(self.device, self.amp_dtype):
                loss = self.loss_fn(self.net(x), y)
            scaled = loss / s.accumulate_grad_batches if s.accumulate_grad_batches > 1 else loss
            self.scaler.scale(scaled).backward()
        self._epoch_loss.add_(loss.detach(), alpha=len(y))
        progress.samples += len(y)
        self.live.batch(len(y), at_boundary)
        if at_boundary:
            self._optimizer_step()
            self._after_step(loss, stop)

    def _optimizer_step(self) -> None:
        if self.settings.gradient_clip_norm:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self._params, self.settings.gradient_clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        assert self.scheduler is not None
        self.scheduler.step()
        self.progress.global_step += 1

    def _after_step(self, loss: torch.Tensor, stop: GracefulStop) -> None:
        """Bookkeeping at an optimizer-step boundary: logs, periodic saves, stop requests."""
        progress = self.progress
        if progress.global_step % self.settings.log_every_n_steps == 0:
            self._log_loss()
            self._logged = (progress.global_step, loss.detach(), self._lr())
        if self.checkpoints.due_at_step(progress.global_step):
            self._save()
        if self.stop_vote(stop.requested, progress.global_step):
            self._log_loss()
            self._save()
            self.checkpoints.close()
            raise StopRequested(stop.signum or signal.SIGTERM)

    def _log_loss(self) -> None:
        """Log the loss kept at the last log point, with its own step."""
        if self._logged is not None:
            step, loss, lr = self._logged
            self.tracker.log({"train/loss": float(loss), "train/lr": lr}, step=step)
            self._logged = None

    def _lr(self) -> float:
        assert self.scheduler is not None
        return float(self.scheduler.get_last_lr()[0])

    # ---- evaluation -----------------------------------------------------------------------

    def evaluate(self, loader: Any, prefix: str, limit_batches: int | None = None) -> dict:
        """Mean loss and accuracy over a loader of this rank's share of a split (make_loader's
        even=False); every rank must call, and the sums are combined exactly."""
        totals = score_shares(self.eval_net, loader, self.runtime, self.runtime.distributed,
                              self.amp_dtype, limit_batches, self.memory_format)  # fmt: skip
        return as_metrics(totals.tolist(), prefix)

    def test(self, split: AnySplit) -> dict[str, float]:
        """Mean loss and accuracy over `split`, in this process alone (the main one)."""
        totals = score_split(self.eval_net, split, self.data.batch_size, self.runtime, shard=False,
                             memory_format=self.memory_format)  # fmt: skip
        return as_metrics(totals.tolist(), "test")

    # ---- checkpoints ----------------------------------------------------------------------

    def _save(self) -> None:
        """Write last.pt (and a pending best.pt) with everything a resume needs."""
        if not self.runtime.is_main:
            return
        self.progress.loss_sum = float(self._epoch_loss)
        assert self.scheduler is not None
        self.checkpoints.write(
            {
                "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "progress": asdict(self.progress),
                "best": self.best.state_dict(),
                "best_val": self.best_val,
                "early_stopping": self.early_stopping and self.early_stopping.monitor.state_dict(),
                "rng": rng_state(),
            }
        )

    def _restore(self, path: Path) -> None:
        state = checkpoint.load(path)  # on the CPU: each load_state_dict places its own
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        assert self.scheduler is not None
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.progress = checkpoint.Progress(**state["progress"])
        self.best.load_state_dict(state["best"])
        self.best_val = state["best_val"]
        if self.early_stopping is not None and state["early_stopping"] is not None:
            self.early_stopping.monitor.load_state_dict(state["early_stopping"])
        set_rng_state(state["rng"])
        p = self.progress
        outputs.log_resumed(path, p.epoch, p.batches_done, p.global_step)

    def load_best_weights(self) -> None:
        """Put the best checkpoint's weights into the model (for the final test)."""
        self.model.load_state_dict(self.checkpoints.best_state()["model"])
