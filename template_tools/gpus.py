"""Which GPUs each cloud offers: the generated project's own catalog, cloud/catalog.json.

One catalog: the prompt check reads the file the project's `invoke train --cloud` launches from.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from template_tools.errors import AnswerError

CATALOG = (
    Path(__file__).resolve().parent.parent
    / "{{cookiecutter.project_slug}}"
    / "cloud"
    / "catalog.json"
)


@cache
def _clouds() -> dict[str, dict[str, Any]]:
    return json.loads(CATALOG.read_text(encoding="utf-8"))["clouds"]


def gpus_on(cloud: str) -> list[str]:
    """The GPUs `cloud` offers, in catalog order; KeyError for an unknown cloud."""
    return list(_clouds()[cloud]["gpus"])


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
