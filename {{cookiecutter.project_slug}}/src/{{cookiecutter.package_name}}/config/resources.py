"""What a command line names must be there and usable, checked before Hydra makes a run folder:
a named run folder this user can write, holding (if anything) a run of the same model and data;
the data; the checkpoint; a GPU, if one is asked for; a compiler, if compiling is. Each failure is
one BadCommandLine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..data import sources
from ..data.splits import DataError
from ..training import storage

# A run directory's saved config must match a resume's in these groups: the weights and the
# data positions in a checkpoint only make sense for them.
RESUME_MUST_MATCH = ("model", "data")
# Keys of those groups that may change between a run and its resume.
RESUME_MAY_CHANGE = {"data.num_workers"}


class BadCommandLine(Exception):
    """What is wrong with the command line, in one line."""


def check_resources(cfg: DictConfig, config_name: str, overrides: list[str]) -> None:
    """Raise BadCommandLine for the first thing the composed `cfg` names that is not usable."""
    if config_name != "evaluate":
        _check_writable(overrides)
        _check_resume(cfg, overrides)
        _check_data(cfg.data, config_name)
    _check_checkpoint(cfg, config_name)
    _check_device(cfg, config_name, overrides)
    _check_compile(cfg)


def _check_resume(cfg: DictConfig, overrides: list[str]) -> None:
    """A named run directory that already holds a run must be resumed with the same model and
    data; its config.yaml and .hydra/ are left as they are."""
    if not any(arg.startswith("hydra.run.dir=") for arg in overrides):
        return  # a new, timestamped folder
    run_dir = Path(str(OmegaConf.select(cfg, "hydra.run.dir")))
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        return
    saved = OmegaConf.to_container(OmegaConf.load(saved_path))
    wanted = {}
    for group in RESUME_MUST_MATCH:
        wanted[group] = OmegaConf.to_container(cfg[group], resolve=True)
    differ = [
        path
        for group in RESUME_MUST_MATCH
        for path in _differences(group, saved.get(group), wanted[group])  # type: ignore[union-attr]
        if path not in RESUME_MAY_CHANGE
    ]
    if differ:
        raise BadCommandLine(
            f"hydra.run.dir={run_dir} holds a run with other settings ({', '.join(differ)}), "
            "which its checkpoint cannot resume; start a new run with another hydra.run.dir "
            "(or none, for a new dated folder)"
        )


def _check_writable(overrides: list[str]) -> None:
    """A named run directory, and whatever it already holds, must be this user's to write: a
    resumed run appends to its log and replaces its checkpoints and saved config."""
    given = [arg.split("=", 1)[1] for arg in overrides if arg.startswith("hydra.run.dir=")]
    if not given or "${" in given[-1]:
        return
    run_dir = Path(given[-1])
    existing = next(p for p in [run_dir, *run_dir.parents] if p.exists())
    blocked = [existing] if not os.access(existing, os.W_OK | os.X_OK) else []
    if existing == run_dir:
        blocked += [path for path in sorted(run_dir.rglob("*")) if not os.access(path, os.W_OK)]
    if blocked:
        owner = blocked[0].stat().st_uid
        raise BadCommandLine(
            f"hydra.run.dir={run_dir}: {blocked[0]} is not writable by this user (uid "
            f"{os.getuid()}; it belongs to uid {owner}); give the folder to uid {os.getuid()} "
            "(chown -R) or choose another hydra.run.dir"
        )


def _differences(path: str, saved: Any, wanted: Any) -> list[str]:
    """The dotted keys under `path` whose values differ between two plain configs."""
    if isinstance(saved, dict) and isinstance(wanted, dict):
        return [
            found
            for name in sorted(set(saved) | set(wanted))
            for found in _differences(f"{path}.{name}", saved.get(name), wanted.get(name))
        ]
    return [] if saved == wanted else [path]


def _check_data(cfg: DictConfig, config_name: str) -> None:
    """The data must be there: a local file, a built-in name, or a prepared dataset's index."""
    source = str(cfg.source)
    if cfg.shards is not None:
        if config_name == "crossval":
            raise BadCommandLine(
                "crossval reads its data whole and data=shards streams it: cross-validate with "
                "data=files on the .npz or .csv the shards were prepared from"
            )
        from ..data.shards.index import Index

        try:
            Index.read(source)
        except DataError as error:
            raise BadCommandLine(str(error)) from None
        return
    if source.startswith(sources.BUILTIN_PREFIX):
        name = source.removeprefix(sources.BUILTIN_PREFIX)
        if name not in sources.BUILTIN_DATASETS:
            choices = ", ".join(sources.BUILTIN_PREFIX + n for n in sources.BUILTIN_DATASETS)
            raise BadCommandLine(
                f"data.source={source}: no such built-in dataset; choose {choices}"
            )
        return
    local = "://" not in source or source.startswith("file://")
    path = Path(source.removeprefix("file://"))
    if local and path.is_dir() and (path / "index.json").is_file():
        raise BadCommandLine(
            f"data.source={source} is a prepared dataset (shards): train on it with data=shards"
        )
    if not source.endswith(sources.FILE_FORMATS):
        raise BadCommandLine(
            f"data.source={source}: give a {' or a '.join(sources.FILE_FORMATS)} file "
            "(data=files), or prepared shards (data=shards)"
        )
    if local and not path.is_file():
        raise BadCommandLine(f"data.source={source}: no such file")


def _check_checkpoint(cfg: DictConfig, config_name: str) -> None:
    """`ckpt_path` must be a checkpoint file, or a run directory holding one."""
    path = cfg.get("ckpt_path")
    if not path:
        return
    from ..training import checkpoint  # the framework's: only when a checkpoint is named

    name = checkpoint.BEST if config_name == "evaluate" else checkpoint.LAST
    try:
        storage.resolve(path, name)
    except FileNotFoundError as error:
        raise BadCommandLine(f"ckpt_path={path}: {error}") from None


def _check_device(cfg: DictConfig, config_name: str, overrides: list[str]) -> None:
    """A CUDA GPU asked for must be there: a run never trains on the CPU instead, unasked."""
    key = "device" if config_name == "evaluate" else "trainer.device"
    if OmegaConf.select(cfg, key) != "cuda":
        return
    from ..training import runtime  # the framework: only when a GPU is asked for

    if runtime.gpu_count() == 0:
        given = "trainer=gpu" if "trainer=gpu" in overrides else f"{key}=cuda"
        instead = "device=cpu" if config_name == "evaluate" else "trainer=cpu"
        raise BadCommandLine(
            f"{given}: no CUDA GPU is visible here (none, or CUDA_VISIBLE_DEVICES hides them); "
            f"run on the CPU with {instead}"
        )


def _check_compile(cfg: DictConfig) -> None:
    """trainer.compile=true must be able to compile here (training/toolchain.py says what the
    framework's compiler needs), or the first step would end the run in a traceback."""
    if not OmegaConf.select(cfg, "trainer.compile"):
        return
    from ..training import runtime, toolchain  # the framework: only when compiling is asked for

    device = OmegaConf.select(cfg, "trainer.device")
    problem = toolchain.compile_problem(
        on_gpu=device == "cuda" or (device == "auto" and runtime.gpu_count() > 0)
    )
    if problem:
        raise BadCommandLine(f"trainer.compile=true: {problem}")
