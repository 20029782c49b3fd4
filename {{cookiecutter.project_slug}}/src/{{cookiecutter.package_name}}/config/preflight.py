"""Check a command line before Hydra makes anything: one line for what is wrong, exit status 2.

Hydra creates the run directory (and `.hydra/` in it) before the task starts, and reports a bad
override in several lines with a hint that may not help (`+trainer.max_epoch=3` adds the typo and
trains without it). So each entry point first composes its config here, as Hydra will, and stops
with one line naming the key, the value and what it must be when:

- an override names a config that does not exist (`model=transformer`) or a key nothing reads
  (`trainer.max_epoch=3`, with or without `+`), or has a value of the wrong type or range;
- a run directory that already holds a run is given another model or data config, or holds
  files this user cannot write (a folder restored by another user: a service's root);
- `ckpt_path` points at no checkpoint;
- `data.source` is a local file that is not there, or not a prepared dataset under data=shards
  (whose index is read here, from a bucket too).

A sweep (`-m`) is checked job by job. Command lines with Hydra's own flags (`--help`, `--cfg`,
`--config-name`, ...) go to Hydra unchecked.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    MissingMandatoryValue,
    OmegaConfBaseException,
)

from ..data import sources
from ..data.splits import DataError
from ..training import storage
from . import checks, schema

CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs"  # src/PACKAGE/config/ -> configs/
MULTIRUN_FLAGS = ("-m", "--multirun")
# A run directory's saved config must match a resume's in these groups: the weights and the
# data positions in a checkpoint only make sense for them.
RESUME_MUST_MATCH = ("model", "data")
# Keys of those groups that may change between a run and its resume.
RESUME_MAY_CHANGE = {"data.num_workers"}
# Sweeps larger than this are checked on their first jobs only.
MAX_CHECKED_JOBS = 64


class BadCommandLine(Exception):
    """What is wrong with the command line, in one line."""


def check(config_name: str, argv: list[str]) -> None:
    """Exit with status 2 and one line on stderr when `argv` (sys.argv[1:]) cannot run."""
    try:
        check_overrides(config_name, argv)
    except BadCommandLine as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def check_overrides(config_name: str, argv: list[str]) -> None:
    """Raise BadCommandLine for the first problem of the jobs `argv` describes."""
    if any(arg.startswith("-") and arg not in MULTIRUN_FLAGS for arg in argv):
        return  # Hydra's own flags: its help, config printing, another config
    overrides = [arg for arg in argv if arg not in MULTIRUN_FLAGS]
    jobs = _jobs(overrides) if any(arg in MULTIRUN_FLAGS for arg in argv) else [overrides]
    for job in jobs[:MAX_CHECKED_JOBS]:
        _check_groups(job)
        cfg = _compose(config_name, job)
        typed = dict(arg.lstrip("+~").split("=", 1) for arg in job if "=" in arg)
        for problem in checks.plain_problems(cfg, schema.SCHEMAS[config_name], typed):
            raise BadCommandLine(problem)
        if config_name != "evaluate":
            _check_writable(job)
            _check_resume(cfg, job)
            _check_data(cfg.data, config_name)
        _check_checkpoint(cfg, config_name)
        _check_device(cfg, config_name, job)
        for problem in checks.target_problems(cfg):  # last: they import the framework
            raise BadCommandLine(problem)


def _jobs(overrides: list[str]) -> list[list[str]]:
    """The override lists of a grid sweep's jobs (`optimizer.lr=0.001,0.01` makes two)."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as error:
        raise BadCommandLine(_first_line(error)) from None
    # Hydra's own expansion (an internal module of the pinned hydra-core 1.3).
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _check_groups(overrides: list[str]) -> None:
    """`group=option` must name a file configs/<group>/<option>.yaml."""
    parser = OverridesParser.create()
    for given in overrides:
        try:
            parser.parse_overrides([given])
        except HydraException:  # not Hydra's override grammar
            raise BadCommandLine(
                f"{given}: not an override Hydra can read; quote a value that holds spaces, "
                "quotes or brackets, inside the shell's quotes: 'key=\"a value\"'"
            ) from None
    for override in parser.parse_overrides(overrides):
        group = override.key_or_group
        folder = CONFIG_DIR / group
        if override.package or "." in group or group == "hydra" or not folder.is_dir():
            continue
        value = override.value()
        if not isinstance(value, str) or override.is_delete():
            continue
        if not (folder / f"{value}.yaml").is_file():
            # _name.yaml files are shared parts of the group's configs, not options.
            options = sorted(p.stem for p in folder.glob("*.yaml") if not p.stem.startswith("_"))
            raise BadCommandLine(
                f"{group}={value}: configs/{group}/ has no {value}.yaml; "
                f"choose one of {', '.join(options)}"
            )


def _compose(config_name: str, overrides: list[str]) -> DictConfig:
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            return compose(config_name, overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as error:
        raise BadCommandLine(_composition_problem(error, config_name, overrides)) from None


def _composition_problem(error: Exception, config_name: str, overrides: list[str]) -> str:
    """One line for what Hydra or OmegaConf refused while composing."""
    cause = error.__cause__ if isinstance(error.__cause__, OmegaConfBaseException) else error
    if isinstance(error, MissingConfigException):
        return _first_line(error)
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        path = str(cause.full_key)
        if isinstance(cause, ConfigKeyError | ConfigAttributeError):
            return _unknown_key(path, config_name, overrides)
        if isinstance(cause, MissingMandatoryValue):
            return f"{path} has no value; set it: {path}=..."
        value = getattr(cause, "value", None)
        wants = schema.wants(path, schema.SCHEMAS[config_name])
        if wants is not None:
            return f"{path}={value} must be {wants}"
        return f"{path}={value}: {_first_line(cause)}"
    return _first_line(error)


def _unknown_key(path: str, config_name: str, overrides: list[str]) -> str:
    """An override names a key the config lacks: the nearest key, or how to add an argument."""
    parent = path.rpartition(".")[0]
    known = schema.keys_at(parent, schema.SCHEMAS[config_name])
    if known or not parent:
        return checks.unknown_key(path, known or schema.keys_at("", schema.SCHEMAS[config_name]))
    # An untyped group (a `_target_` class's arguments): its keys are those its config has.
    rest = [arg for arg in overrides if not arg.lstrip("+~").startswith(f"{path}=")]
    node = OmegaConf.select(_compose(config_name, rest), parent)
    known = [f"{parent}.{name}" for name in node or {} if not str(name).startswith("_")]
    message = checks.unknown_key(path, known)
    if isinstance(node, DictConfig) and "_target_" in node and not checks.is_near_miss(path, known):
        value = next((a.split("=", 1)[1] for a in overrides if a.startswith(f"{path}=")), "...")
        message += f"; to pass {node._target_} another argument, add it: +{path}={value}"
    return message


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


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
