"""Which module makes the job of a backend on a cloud: `invoke train --backend=managed` is the
cloud's own training service, `--backend=skypilot` SkyPilot on it."""

from __future__ import annotations

from types import ModuleType

from ..plan import PlanError
from . import azureml, sagemaker, skypilot, vertex

ENGINES: dict[tuple[str, str], ModuleType] = {
    ("managed", "aws"): sagemaker,
    ("managed", "gcp"): vertex,
    ("managed", "azure"): azureml,
    ("skypilot", "aws"): skypilot,
    ("skypilot", "gcp"): skypilot,
    ("skypilot", "azure"): skypilot,
}


def engine(backend: str, cloud: str) -> ModuleType:
    if (backend, cloud) not in ENGINES:
        clouds = sorted({name for kind, name in ENGINES if kind == backend})
        raise PlanError(
            f"--cloud {cloud}: --backend={backend} runs on {', '.join(clouds)}"
            + (" (--cloud=local is --backend=vm only)" if cloud == "local" else "")
        )
    return ENGINES[backend, cloud]
