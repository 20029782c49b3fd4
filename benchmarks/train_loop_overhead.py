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


def load_project(workdir: Path) -> tuple[str, object]:
    """Bake the default project and import its package."""
    project = bake(TEMPLATE_DIR, workdir, {})
    package = default_answers(TEMPLATE_DIR)["package_name"]
    sys.path.insert(0, str(project / "src"))
    return package, __import__(package)


def bare_loop(model, optimizer, splits, batch_size: int, epochs: int, seed: int) -> int:
    """What a person writes by hand: DataLoader, forward, backward, step, validate."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    train = TensorDataset(torch.from_numpy(splits.train.x), torch.from_numpy(splits.train.y))
    val = TensorDataset(torch.from_numpy(splits.val.x), torch.from_numpy(splits.val.y))
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(train, batch_size=batch_size, shuffle=True, generator=generator)
    val_loader = DataLoader(val, batch_size=batch_size)
    loss_fn = torch.nn.CrossEntropyLoss()
    steps = 0
    for _ in range(epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
            steps += 1
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(x).argmax(1) == y).sum()) for x, y in val_loader)
        del correct
    return steps


def project_loop(package: str, model, splits, batch_size: int, epochs: int, seed: int) -> int:
    """The generated project's Trainer, configured like the bare loop (no clipping, fp32)."""
    import importlib

    import torch
    from omegaconf import OmegaConf

    loop = importlib.import_module(f"{package}.loop")
    runtime = importlib.import_module(f"{package}.runtime")
    schedules = importlib.import_module(f"{package}.schedules")
    signals = importlib.import_module(f"{package}.signals")
    tracking = importlib.import_module(f"{package}.tracking")
    settings = OmegaConf.create(
        {
            "max_epochs": epochs,
            "precision": "fp32",
            "accumulate_grad_batches": 1,
            "gradient_clip_norm": None,
            "compile": False,
            "log_every_n_steps": 10,
            "progress_bar": False,
            "limit_train_batches": None,
            "limit_eval_batches": None,
        }
    )
    callbacks = OmegaConf.create(
        {
            "early_stopping": None,
            "checkpoint": {
                "monitor": "val/accuracy",
                "mode": "max",
                "every_n_steps": None,
                "mirror_uri": None,
            },
        }
    )
    with tempfile.TemporaryDirectory() as run_dir:
        tracker = tracking.start(Path(run_dir), {}, {}, enabled=True)
        trainer = loop.Trainer(
            model,
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
    args = parser.parse_args()

    import importlib

    import torch

    torch.set_num_threads(1)  # steadier figures; both loops get the same
    with tempfile.TemporaryDirectory() as workdir:
        package, _ = load_project(Path(workdir))
        data = importlib.import_module(f"{package}.data")
        mlp = importlib.import_module(f"{package}.models.mlp")
        splits = data.load_splits("builtin:digits", 0.15, 0.15, 1234)
        rates: dict[str, list[float]] = {"bare PyTorch loop": [], "project Trainer": []}
        for _ in range(args.rounds):
            for name in rates:
                torch.manual_seed(0)
                model = mlp.MLP(splits.input_shape, splits.num_classes)
                started = time.perf_counter()
                if name == "project Trainer":
                    steps = project_loop(
                        package, model, splits, args.batch_size, args.epochs, seed=0
                    )
                else:
                    optimizer = torch.optim.AdamW(model.parameters(), lr=0.003)
                    steps = bare_loop(model, optimizer, splits, args.batch_size, args.epochs, 0)
                rates[name].append(steps / (time.perf_counter() - started))

    bare = statistics.median(rates["bare PyTorch loop"])
    ours = statistics.median(rates["project Trainer"])
    print(f"{args.epochs} epochs x {args.rounds} rounds, batch {args.batch_size}, 1 CPU thread")
    print(f"{'loop':<20} {'steps/s (median)':>17} {'min':>9} {'max':>9}")
    for name, values in rates.items():
        print(f"{name:<20} {statistics.median(values):>17.1f} {min(values):>9.1f} {max(values):>9.1f}")
    print(f"overhead: {100 * (1 - ours / bare):+.1f}% (target: under 5%)")


if __name__ == "__main__":
    main()
