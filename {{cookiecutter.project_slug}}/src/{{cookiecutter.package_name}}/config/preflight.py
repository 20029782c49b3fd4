"""Check a command line before Hydra makes anything: one line for what is wrong, exit status 2.

Hydra creates the run directory (and `.hydra/` in it) before the task starts, and reports a bad
override in several lines with a hint that may not help (`+trainer.max_epoch=3` adds the typo and
trains without it). So each entry point first composes its config here, as Hydra will, and stops
with one line naming the key, the value and what it must be when:

- an override names a config that does not exist (`model=transformer`) or a key nothing reads
  (`trainer.max_epoch=3`, with or without `+`), or has a value of the wrong type or range;
- what it names is not there or not usable (resources.py): a run folder of another model or
  data, or not this user's to write; the data; the checkpoint; a GPU.

A sweep (`-m`) is checked job by job. Command lines with Hydra's own flags (`--help`, `--cfg`,
`--config-name`, ...) go to Hydra unchecked.
"""

from __future__ import annotations

import sys
from pathlib import Path

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

from . import checks, schema
from .resources import BadCommandLine, check_resources

CONFIG_DIR = Path(__file__).resolve().parents[3] / "configs"  # src/PACKAGE/config/ -> configs/
MULTIRUN_FLAGS = ("-m", "--multirun")
# Sweeps larger than this are checked on their first jobs only.
MAX_CHECKED_JOBS = 64


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
        check_resources(cfg, config_name, job)
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


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
