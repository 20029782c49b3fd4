"""How the entry points start a job: check the command line, start Hydra, join the processes.

`run(config, main)` is the `__main__` of train.py, crossval.py and evaluate.py; `job(device)` the
runtime and the run directory that training entry points share.
"""

from __future__ import annotations

import logging
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from ..data.splits import DataError
from ..tracking.live import MonitoringError
from . import preflight
from .schema import register

# Errors a job meets once it runs that are the user's to fix: one line, exit status 2.
ONE_LINE_ERRORS = (DataError, MonitoringError)


def run(config_name: str, main: Callable[[DictConfig], Any]) -> None:
    """Run `main` as a Hydra app on configs/<config_name>.yaml, its command line checked first."""
    register()
    preflight.check(config_name, sys.argv[1:])
    quiet_non_zero_ranks()
    hydra.main(version_base="1.3", config_path=str(preflight.CONFIG_DIR), config_name=config_name)(
        _one_line_errors(main)
    )()


def prepare_node(argv: list[str]) -> None:
    """A managed job's node before it starts training (launch.py): its secrets from the cloud's
    store into the environment, then its command line checked, each failure in one line here
    rather than a traceback from every process it would start."""
    from ..cluster import run_secrets

    try:
        run_secrets.export()
    except run_secrets.SecretError as error:
        sys.exit(f"error: {error}")
    register()
    preflight.check("train", argv)


def _one_line_errors(main: Callable[[DictConfig], Any]) -> Callable[[DictConfig], Any]:
    """Data that turns out unreadable once the job runs (a bucket, a shard, a file's contents),
    or a monitoring port that is taken, ends it with one line and exit status 2, as preflight
    does, not a traceback."""

    def checked(cfg: DictConfig) -> Any:
        try:
            return main(cfg)
        except ONE_LINE_ERRORS as error:
            print(f"error: {_last_line(error)}", file=sys.stderr)
            raise SystemExit(2) from None

    checked.__module__ = main.__module__  # Hydra names the job (hydra.job.name) after it
    return checked


@contextmanager
def job(device: str) -> Iterator[tuple[Any, Path]]:
    """This process's runtime and the job's run directory (chosen by the first process)."""
    from ..training import runtime  # the framework: loaded once the command line is checked

    rt = runtime.start(device)
    try:
        run_dir = runtime.broadcast(HydraConfig.get().runtime.output_dir, rt)
        assert run_dir is not None
        try:
            yield rt, run_dir
        except ONE_LINE_ERRORS:
            if rt.is_main:
                _remove_if_only_hydra(run_dir)
            raise
    finally:
        runtime.stop(rt)


def _last_line(error: Exception) -> str:
    """The error's own message: A DataLoader re-raises a worker's error with the worker's
    traceback in the message, which ends with `module.ShardError: the message`."""
    text = str(error).strip()
    if "Traceback (most recent call last)" not in text:
        return text
    last = text.splitlines()[-1]
    return last.split(f"{type(error).__name__}: ", 1)[-1]


def _remove_if_only_hydra(run_dir: Path) -> None:
    """A run that failed on its data before training leaves no folder behind (unless the folder
    holds anything besides what Hydra wrote into it: a resumed run's checkpoints, say)."""
    if not all(p.name == ".hydra" or p.suffix == ".log" for p in run_dir.iterdir()):
        return
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in list(getattr(logger, "handlers", [])):
            if isinstance(handler, logging.FileHandler) and Path(
                handler.baseFilename
            ).is_relative_to(run_dir.resolve()):
                logger.removeHandler(handler)  # type: ignore[union-attr]
                handler.close()
    shutil.rmtree(run_dir, ignore_errors=True)


def quiet_non_zero_ranks() -> None:
    """Processes other than the first of a job write nothing of their own: no Hydra output
    folder, no log file."""
    from ..training import runtime

    if runtime.process_rank() == 0:
        return
    sys.argv += ["hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none"]
    if not any(arg.startswith("hydra.run.dir=") for arg in sys.argv):
        # Rank 0 picks the timestamped folder; don't create a second one a second later.
        sys.argv.append(f"hydra.run.dir={tempfile.gettempdir()}")
