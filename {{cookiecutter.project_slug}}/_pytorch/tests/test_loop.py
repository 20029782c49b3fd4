"""What only the PyTorch loop does: its step count under accumulation, a compiled model (and the
refusal to compile without a compiler), the optimizer and memory layout it picks on a GPU."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch
from conftest import SHORT, project_env, run_module, train

from {{ cookiecutter.package_name }}.training import checkpoint
from {{ cookiecutter.package_name }}.training.runtime import compiled, make_optimizer, memory_format


def test_grad_accumulation_clipping_and_precision(tmp_path: Path) -> None:
    train(
        tmp_path,
        *SHORT,
        "trainer.accumulate_grad_batches=2",
        "trainer.gradient_clip_norm=0.5",
        "trainer.precision=bf16",
        "trainer.deterministic=false",
        "scheduler=constant",
        "optimizer=sgd",
    )
    state = checkpoint.load(tmp_path / "checkpoints" / checkpoint.LAST)
    # 5 batches per epoch in pairs: steps at batches 2, 4 and the epoch's last (5).
    assert state["progress"]["global_step"] == 3 * 3


@pytest.mark.slow
def test_compiled_model_trains_and_saves_plain_weights(tmp_path: Path) -> None:
    train(tmp_path, "debug=fast", "logger=jsonl", "trainer.compile=true")
    state = checkpoint.load(tmp_path / "checkpoints" / checkpoint.BEST)
    # Checkpoints hold the plain module's weights, loadable without torch.compile.
    assert state["model"] and not any(key.startswith("_orig_mod") for key in state["model"])


def test_on_a_gpu_the_optimizer_takes_its_fused_kernel_unless_the_config_chooses() -> None:
    """On CUDA, AdamW as configs/optimizer/adamw.yaml makes it (a partial) gets fused=True; on
    the CPU, with fused set in the config, or for an optimizer without one, nothing changes."""

    class Plain(torch.optim.Optimizer):  # an optimizer with no fused kernel
        def __init__(self, params: list[torch.nn.Parameter], lr: float) -> None:
            super().__init__(params, {"lr": lr})

    params = [torch.nn.Parameter(torch.zeros(3))]
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    adamw = partial(torch.optim.AdamW, lr=1e-3)
    assert make_optimizer(adamw, params, cuda).defaults["fused"] is True
    assert not make_optimizer(adamw, params, cpu).defaults["fused"]
    chosen = partial(torch.optim.AdamW, lr=1e-3, fused=False)
    assert make_optimizer(chosen, params, cuda).defaults["fused"] is False
    assert "fused" not in make_optimizer(partial(Plain, lr=0.1), params, cuda).defaults


@pytest.mark.slow
def test_compiling_without_a_compiler_stops_in_one_line_before_a_run_folder(tmp_path: Path):
    env = project_env(PATH=str(tmp_path / "bin"))  # a PATH with no compiler on it
    env.pop("CXX", None)
    run_dir = f"hydra.run.dir={tmp_path}/run"
    result = run_module("train", *SHORT, "trainer.compile=true", run_dir, env=env)
    assert result.returncode == 2, result.stdout
    assert result.stdout.strip().splitlines() == [
        "error: trainer.compile=true: torch.compile needs a C++ compiler ($CXX or g++) and "
        "Python's headers, and none is on PATH; install them (apt-get install g++ python3-dev) "
        "or train uncompiled (trainer.compile=false)"
    ]
    assert not (tmp_path / "run").exists()


def test_compiled_steps_keep_one_static_graph_per_batch_shape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An epoch's short last batch costs one more graph, not a shape-generic one that every later
    batch runs: with static shapes, a third batch size compiles a third graph. Dynamo decides
    the graphs; its eager backend runs them without building C++ kernels (a minute of g++ on a
    CPU; the Docker tests build them, in the image)."""
    from torch._dynamo.utils import counters

    monkeypatch.setattr(torch, "compile", partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    counters.clear()
    net = compiled(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()))
    for rows in (8, 5, 8, 3):
        net(torch.randn(rows, 4))
    assert counters["stats"]["unique_graphs"] == 3  # 8, 5 and 3; automatic dynamic: 2


def test_a_convolutional_model_goes_channels_last_on_cuda_alone() -> None:
    cnn = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten())
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 3))
    assert memory_format(cnn, torch.device("cuda")) == torch.channels_last
    assert memory_format(cnn, torch.device("cpu")) == torch.contiguous_format
    assert memory_format(mlp, torch.device("cuda")) == torch.contiguous_format
