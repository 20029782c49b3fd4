"""Training-loop overhead, PyTorch: the generated project's Trainer against a bare loop.

Both train the same model on the same digits split with the same batch size, optimizer and
epochs, and both validate after every epoch; the Trainer also does what it exists for (resumable
sampler, autocast and scaler plumbing, logging, stop-signal checks, a checkpoint after every
epoch). Two cases: the tiny default (the MLP, batch 64), where the per-step cost of that
bookkeeping shows, in microseconds per step; and a compute-bound one (the CNN, batch 512), where
it must vanish: target Trainer steps/s at least 0.98 of the fastest bare loop's. The peer people
pick instead, PyTorch Lightning, runs the same cases. The loops alternate for several rounds in
one process so machine noise hits all alike; medians are reported.

    invoke bench loop [-- --rounds 5]

`invoke bench` bakes the default project, installs it (and Lightning) in a venv of its own and
runs this script with that venv's Python and `--project`.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from overhead import load_project, print_table, project_trainer, timed_rounds

OURS = "project Trainer"
PEER = "PyTorch Lightning (peer)"
CASES = {  # name: (model, batch size, epochs)
    "tiny default": ("mlp", 64, 20),
    "compute-bound": ("cnn", 512, 30),
}


def torch_loaders(splits, batch_size: int, seed: int) -> tuple:
    """The loaders a person writes by hand: TensorDataset + DataLoader(shuffle=True)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    train = TensorDataset(torch.from_numpy(splits.train.x), torch.from_numpy(splits.train.y))
    val = TensorDataset(torch.from_numpy(splits.val.x), torch.from_numpy(splits.val.y))
    generator = torch.Generator().manual_seed(seed)
    return (
        DataLoader(train, batch_size=batch_size, shuffle=True, generator=generator),
        DataLoader(val, batch_size=batch_size),
    )


def project_loaders(package: str, splits, batch_size: int, seed: int) -> tuple:
    """The project's whole-batch loaders, to tell loop overhead from data-loading speed."""
    make_loader = importlib.import_module(f"{package}.data.batches").make_loader
    return (
        make_loader(splits.train, batch_size, shuffle=True, seed=seed),
        make_loader(splits.val, batch_size, shuffle=False),
    )


def bare_loop(model, loaders: tuple, epochs: int) -> int:
    """What a person writes by hand: forward, backward, step; validate after each epoch."""
    import torch

    train_loader, val_loader = loaders
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.003)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = 0
    for epoch in range(epochs):
        if hasattr(train_loader.sampler, "sampler"):  # the project's sampler reshuffles per epoch
            train_loader.sampler.sampler.set_epoch(epoch)
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
            steps += 1
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(x).argmax(1) == y).sum()) for x, y in val_loader)
        del correct
    return steps


def lightning_loop(model, loaders: tuple, epochs: int, folder: str) -> int:
    """The peer people pick instead: PyTorch Lightning's Trainer with its defaults (a checkpoint
    each epoch, validation each epoch) on plain DataLoaders; its logger, progress bar and model
    summary off, as the project's Trainer prints none either here."""
    import logging

    import pytorch_lightning as pl
    import torch

    for name in ("pytorch_lightning", "lightning_fabric"):  # its banner and tips, every run
        logging.getLogger(name).setLevel(logging.WARNING)

    class Classifier(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net, self.loss = model, torch.nn.CrossEntropyLoss()

        def training_step(self, batch: tuple, index: int) -> torch.Tensor:
            return self.loss(self.net(batch[0]), batch[1])

        def validation_step(self, batch: tuple, index: int) -> torch.Tensor:
            return (self.net(batch[0]).argmax(1) == batch[1]).sum()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=0.003)

    trainer = pl.Trainer(
        max_epochs=epochs, accelerator="cpu", devices=1, default_root_dir=folder, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    train_loader, val_loader = loaders
    trainer.fit(Classifier(), train_loader, val_loader)
    return trainer.global_step


def _lightning(splits, batch: int, epochs: int) -> Callable[[Any], int]:
    def run(model) -> int:
        with tempfile.TemporaryDirectory() as folder:
            return lightning_loop(model, torch_loaders(splits, batch, 0), epochs, folder)

    return run


def project_loop(
    project: Path, package: str, model, splits, batch_size: int, epochs: int, seed: int
) -> int:
    """The generated project's Trainer with its default settings (clipping off, like the bare
    loop; checkpoints, logging and signal checks on)."""
    import torch

    runtime = importlib.import_module(f"{package}.training.runtime")
    schedules = importlib.import_module(f"{package}.training.schedules")
    signals = importlib.import_module(f"{package}.training.signals")
    parts = {
        "make_model": lambda: model,
        "make_optimizer": lambda params: torch.optim.AdamW(params, lr=0.003),
        "make_scheduler": schedules.constant,
    }
    with tempfile.TemporaryDirectory() as run_dir:
        rt = runtime.Runtime(torch.device("cpu"))
        trainer, tracker = project_trainer(
            project, package, parts, rt, Path(run_dir), epochs, batch_size, seed
        )
        with signals.GracefulStop() as stop:
            trainer.fit(splits, stop)
        tracker.close()
        return trainer.progress.global_step


def case_runs(
    project: Path, package: str, splits, batch: int, epochs: int
) -> dict[str, Callable[[Any], int]]:
    """The four loops of one case, each a function of a fresh model."""
    return {
        "bare loop, DataLoader": lambda model: bare_loop(
            model, torch_loaders(splits, batch, 0), epochs
        ),
        "bare loop, project loader": lambda model: bare_loop(
            model, project_loaders(package, splits, batch, 0), epochs
        ),
        OURS: lambda model: project_loop(project, package, model, splits, batch, epochs, seed=0),
        PEER: _lightning(splits, batch, epochs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=0, help="override every case's epochs")
    parser.add_argument("--project", type=Path, required=True, help="a baked project")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)  # steadier figures; both loops get the same
    project = args.project.resolve()
    package = load_project(project)
    data = importlib.import_module(f"{package}.data.sources")
    splits = data.load_splits("builtin:digits", 0.15, 0.15, 1234)
    models = {
        "mlp": importlib.import_module(f"{package}.models.mlp").MLP,
        "cnn": importlib.import_module(f"{package}.models.cnn").SmallCNN,
    }
    for case, (model_name, batch, epochs) in CASES.items():
        epochs = args.epochs or epochs
        runs = case_runs(project, package, splits, batch, epochs)

        def fresh_model(name: str = model_name):
            torch.manual_seed(0)
            return models[name](splits.input_shape, splits.num_classes)

        wall, cpu = timed_rounds(runs, fresh_model, args.rounds)
        print(
            f"\n{case}: {model_name}, batch {batch}, {epochs} epochs x {args.rounds} rounds (after "
            "one warm-up round), 1 CPU thread; medians; ours/it = Trainer's speed / that loop's"
        )
        print_table(wall, cpu, OURS)
    print(
        "\ntargets: compute-bound ours/it at least 0.98 against the fastest bare loop; the tiny "
        "default's us/step added is the bookkeeping's cost per step; Lightning is the peer, "
        "measured alike. CPU-seconds include the checkpoint threads and are steadier than wall "
        "time on a shared machine."
    )


if __name__ == "__main__":
    main()
