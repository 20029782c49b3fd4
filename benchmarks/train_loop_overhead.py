"""Training-loop overhead: the generated project's Trainer against a bare PyTorch loop.

Both train the same MLP on the same digits split with the same batch size, optimizer and epochs,
and both validate after every epoch; the Trainer also does what it exists for (resumable sampler,
autocast and scaler plumbing, logging, stop-signal checks, a checkpoint after every epoch). The
two alternate for several rounds in one process so machine noise hits both alike; the median of
each is reported.

    python benchmarks/train_loop_overhead.py [--epochs 20] [--rounds 5]

Run it with a Python that has the project's dependencies (for example the venv `invoke demo` makes:
build/demo/cloud-gpu-project/.venv/bin/python). Target: overhead under 5% on a CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TEMPLATE_DIR))

from template_tools import bake, default_answers  # noqa: E402


def load_project(workdir: Path) -> tuple[Path, str]:
    """Bake the default project and put its package on the import path."""
    project = bake(TEMPLATE_DIR, workdir, {})
    sys.path.insert(0, str(project / "src"))
    return project, default_answers(TEMPLATE_DIR)["package_name"]


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
    import importlib

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
    import importlib

    import torch
    from omegaconf import OmegaConf

    loop = importlib.import_module(f"{package}.loop")
    runtime = importlib.import_module(f"{package}.runtime")
    schedules = importlib.import_module(f"{package}.schedules")
    signals = importlib.import_module(f"{package}.signals")
    tracking = importlib.import_module(f"{package}.tracking")
    # The project's own defaults, minus what the bare loop does not do either.
    configs = project_dir / "configs"
    schema = importlib.import_module(f"{package}.schema")
    settings = OmegaConf.merge(
        OmegaConf.structured(schema.TrainerConfig),
        OmegaConf.load(configs / "trainer" / "default.yaml"),
        {"max_epochs": epochs, "device": "cpu", "gradient_clip_norm": None, "progress_bar": False},
    )
    callbacks = OmegaConf.merge(
        OmegaConf.structured(schema.CallbacksConfig),
        OmegaConf.load(configs / "callbacks" / "default.yaml"),
        {"early_stopping": None},
    )
    with tempfile.TemporaryDirectory() as run_dir:
        tracker = tracking.start(Path(run_dir), {}, {}, enabled=True)
        trainer = loop.Trainer(
            make_model=lambda: model,
            make_optimizer=lambda params: torch.optim.AdamW(params, lr=0.003),
            make_scheduler=schedules.constant,
            settings=OmegaConf.to_object(settings),
            callbacks=OmegaConf.to_object(callbacks),
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
    args = parser.parse_args()

    import importlib

    import torch

    torch.set_num_threads(1)  # steadier figures; both loops get the same
    with tempfile.TemporaryDirectory() as workdir:
        project, package = load_project(Path(workdir))
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
            "project Trainer": lambda model: project_loop(
                project, package, model, splits, args.batch_size, args.epochs, seed=0
            ),
        }
        wall: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        for round_ in range(args.rounds + 1):  # round 0 warms up caches and allocators
            for name, run in runs.items():
                torch.manual_seed(0)
                model = mlp.MLP(splits.input_shape, splits.num_classes)
                started, started_cpu = time.perf_counter(), time.process_time()
                steps = run(model)
                if round_ > 0:
                    wall[name].append(steps / (time.perf_counter() - started))
                    cpu[name].append(steps / (time.process_time() - started_cpu))

    print(
        f"{args.epochs} epochs x {args.rounds} rounds (after one warm-up round), "
        f"batch {args.batch_size}, 1 CPU thread; medians, overhead = Trainer vs that loop"
    )
    print(f"{'loop':<26} {'steps/s':>8} {'overhead':>9} {'steps/CPU-s':>12} {'overhead':>9}")
    ours = {
        kind: statistics.median(rates["project Trainer"])
        for kind, rates in (("wall", wall), ("cpu", cpu))
    }
    for name in runs:
        row = f"{name:<26}"
        for kind, rates in (("wall", wall), ("cpu", cpu)):
            median = statistics.median(rates[name])
            overhead = (
                "" if name == "project Trainer" else f"{100 * (1 - ours[kind] / median):+.1f}%"
            )
            row += f" {median:>{8 if kind == 'wall' else 12}.1f} {overhead:>9}"
        print(row)
    print(
        "target: Trainer overhead under 5% against the hand-written loop. CPU-seconds include the "
        "checkpoint thread and are steadier than wall time on a shared machine."
    )


if __name__ == "__main__":
    main()
