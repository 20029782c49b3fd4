"""Which GPUs each cloud offers: the catalog of the cloudgpu package, cloudgpu/.../catalog.json.

One catalog: the prompt check reads the file the project's `invoke train --cloud` launches from.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from template_tools.errors import AnswerError

CATALOG = Path(__file__).resolve().parent.parent / "cloudgpu" / "src" / "cloudgpu" / "catalog.json"


@cache
def _catalog() -> dict[str, Any]:
    return json.loads(CATALOG.read_text(encoding="utf-8"))


def _clouds() -> dict[str, dict[str, Any]]:
    return _catalog()["clouds"]


def _capability(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def gpus_on(cloud: str) -> list[str]:
    """The GPUs `cloud` offers, in catalog order; KeyError for an unknown cloud."""
    return list(_clouds()[cloud]["gpus"])


def check_gpu_runs_the_image(framework: str, cloud: str, gpu: str) -> None:
    """Raise AnswerError when `gpu` is older than the CUDA of `framework`'s image builds for:
    a project that could never launch on its default GPU."""
    from template_tools.images import min_compute_capability, offered_row

    cuda = offered_row(framework)["cuda"]
    needs = min_compute_capability(cuda)
    capability = {name: spec["compute_capability"] for name, spec in _catalog()["gpus"].items()}
    has = capability[gpu]
    if _capability(has) < _capability(needs):
        runs = [n for n in gpus_on(cloud) if _capability(capability[n]) >= _capability(needs)]
        raise AnswerError(
            f"default_gpu {gpu!r} (compute capability {has}) cannot run the {framework} image: "
            f"its CUDA {cuda} runs on compute capability {needs} and later",
            "default_gpu",
            runs[0],
            f"or another of {', '.join(runs)}",
            choices=runs,
        )


def check_gpu(cloud: str, gpu: str) -> None:
    """Raise AnswerError unless `cloud` offers `gpu`."""
    offered = gpus_on(cloud)
    if gpu not in offered:
        raise AnswerError(
            f"default_gpu {gpu!r} is not offered by default_cloud {cloud!r}, which offers "
            f"{', '.join(offered)}",
            "default_gpu",
            offered[0],
            "or another of those, or another default_cloud",
            choices=offered,
        )
