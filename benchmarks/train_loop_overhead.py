"""Training-loop overhead: the generated project's Trainer against a bare PyTorch loop.

Both train the same MLP on the same digits split with the same batch size, optimizer and epochs,
and both validate after every epoch; the Trainer also does what it exists for (resumable sampler,
autocast and scaler plumbing, logging, stop-signal checks, a checkpoint after every epoch). The
two alternate for several rounds in one process so machine noise hits both alike; the median of
each is reported.

    invoke bench loop [-- --epochs 20 --rounds 5]

`invoke bench` bakes the default project, installs it in a venv of its own and runs this script
with that venv's Python and `--project`. Target: overhead under 5% on a CPU.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
from pathlib import Path

from overhead import load_project, print_table, timed_rounds, trainer_settings

OURS = "project Trainer"


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
    make_loader = importlib.import_module(f"{package}.sampling").make_loader
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


def project_loop(
    project_dir: Path, package: str, model, splits, batch_size: int, epochs: int, seed: int
) -> int:
    """The generated project's Trainer with its default settings (clipping off, like the bare
    loop; checkpoints, logging and signal checks on)."""
    import torch

    loop = importlib.import_module(f"{package}.loop")
    runtime = importlib.import_module(f"{package}.runtime")
    schedules = importlib.import_module(f"{package}.schedules")
    signals = importlib.import_module(f"{package}.signals")
    tracking = importlib.import_module(f"{package}.tracking")
    settings, callbacks = trainer_settings(project_dir, package, epochs)
    with tempfile.TemporaryDirectory() as run_dir:
        tracker = tracking.start(Path(run_dir), {}, {}, enabled=True)
        trainer = loop.Trainer(
            make_model=lambda: model,
            make_optimizer=lambda params: torch.optim.AdamW(params, lr=0.003),
            make_scheduler=schedules.constant,
            settings=settings,
            callbacks=callbacks,
            runtime=runtime.Runtime(torch.device("cpu")),
            tracker=tracker,
            checkpoint_dir=Path(run_dir) / "checkpoints",
            batch_size=batch_size,
            seed=seed,
        )
        with signals.GracefulStop() as stop:
            trainer.fit(splits, stop)
        tracker.close()
        return trainer.progress.global_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--project", type=Path, required=True, help="a baked project")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)  # steadier figures; both loops get the same
    project = args.project.resolve()
    package = load_project(project)
    data = importlib.import_module(f"{package}.data")
    mlp = importlib.import_module(f"{package}.models.mlp")
    splits = data.load_splits("builtin:digits", 0.15, 0.15, 1234)
    runs = {
        "bare loop, DataLoader": lambda model: bare_loop(
            model, torch_loaders(splits, args.batch_size, 0), args.epochs
        ),
        "bare loop, project loader": lambda model: bare_loop(
            model, project_loaders(package, splits, args.batch_size, 0), args.epochs
        ),
        OURS: lambda model: project_loop(
            project, package, model, splits, args.batch_size, args.epochs, seed=0
        ),
    }

    def fresh_model():
        torch.manual_seed(0)
        return mlp.MLP(splits.input_shape, splits.num_classes)

    wall, cpu = timed_rounds(runs, fresh_model, args.rounds)

    print(
        f"{args.epochs} epochs x {args.rounds} rounds (after one warm-up round), "
        f"batch {args.batch_size}, 1 CPU thread; medians, overhead = Trainer vs that loop"
    )
    print_table(wall, cpu, OURS)
    print(
        "target: Trainer overhead under 5% against the hand-written loop. CPU-seconds include the "
        "checkpoint thread and are steadier than wall time on a shared machine."
    )


if __name__ == "__main__":
    main()
