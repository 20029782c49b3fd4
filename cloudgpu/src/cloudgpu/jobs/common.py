"""What the jobs of the training services share (invoke train --backend=managed|skypilot): the
command every node runs, the secrets it reads at start, the job file beside the run's record, and
the states a job ends in. sagemaker.py, vertex.py, azureml.py and skypilot.py build the rest;
engines.py picks one of them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import runs
from ..plan import Plan

# How a service starts the processes of each node, as the framework wants them (Azure ML's
# `distribution`), from the node count: cloudgpu.tasks.frameworks says, for the project's framework.
Distribution = Callable[[int], dict[str, Any]]

# How a job ended, in the words of a VM run's status.json.
ENDED = ("finished", "failed", "stopped", "preempted", "timeout")


def launcher(package: str, run_dir: str, overrides: list[str]) -> list[str]:
    """What each node runs: the package's launcher (it starts training across the nodes), its
    run folder where the service keeps it, the overrides last."""
    return ["python", "-m", f"{package}.launch", f"hydra.run.dir={run_dir}", *overrides]


def environment(plan: Plan) -> dict[str, str]:
    """The variables every node gets: which run, which cloud's secret store, which secrets."""
    env = {"RUN_ID": plan.run_id, "RUN_CLOUD": plan.cloud, "RUN_REGION": plan.region}
    if plan.secrets:  # names only: the launcher reads the values with the job's identity
        env["RUN_SECRETS"] = plan.secret_names
    if plan.cloud == "gcp" and plan.settings.get("project"):
        env["RUN_PROJECT"] = plan.settings["project"]
    if plan.cloud == "azure" and plan.settings.get("key_vault"):
        env["RUN_KEY_VAULT"] = plan.settings["key_vault"]
    return env


def write_spec(plan: Plan, name: str, text: str) -> Path:
    """The job's file (request, config, task) beside the run's record: what was sent, kept."""
    path = runs.folder(plan.run_id) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def as_json(document: Any) -> str:
    return json.dumps(document, indent=2) + "\n"


def as_yaml(document: Any) -> str:
    import yaml  # PyYAML: Hydra's own dependency, so every project has it

    class Plain(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True  # a worker pool written out twice reads better than &id001 / *id001

    return yaml.dump(document, Dumper=Plain, sort_keys=False, width=100)
