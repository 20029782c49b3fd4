"""How the entry points start a job: check the command line, start Hydra, join the processes.

`run(config, main)` is the `__main__` of train.py, crossval.py and evaluate.py; `job(device)` the
runtime and the run directory that training entry points share.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from . import preflight, runtime
from .schema import register


def run(config_name: str, main: Callable[[DictConfig], Any]) -> None:
    """Run `main` as a Hydra app on configs/<config_name>.yaml, its command line checked first."""
    register()
    preflight.check(config_name, sys.argv[1:])
    quiet_non_zero_ranks()
    hydra.main(version_base="1.3", config_path="../../configs", config_name=config_name)(main)()


@contextmanager
def job(device: str) -> Iterator[tuple[Any, Path]]:
    """This process's runtime and the job's run directory (chosen by the first process)."""
    rt = runtime.start(device)
    try:
        run_dir = runtime.broadcast(HydraConfig.get().runtime.output_dir, rt)
        assert run_dir is not None
        yield rt, run_dir
    finally:
        runtime.stop(rt)


def quiet_non_zero_ranks() -> None:
    """Processes other than the first of a job write nothing of their own: no Hydra output
    folder, no log file."""
    if runtime.process_rank() == 0:
        return
    sys.argv += ["hydra.output_subdir=null", "hydra/job_logging=none", "hydra/hydra_logging=none"]
    if not any(arg.startswith("hydra.run.dir=") for arg in sys.argv):
        # Rank 0 picks the timestamped folder; don't create a second one a second later.
        sys.argv.append(f"hydra.run.dir={tempfile.gettempdir()}")
