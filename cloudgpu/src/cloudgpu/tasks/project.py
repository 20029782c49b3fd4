"""What the tasks know of the project they act on: its pyproject.toml's [tool.cloudgpu] table,
written when the project was made (the names below, in kebab case)."""

from __future__ import annotations

import importlib
import tomllib
from types import ModuleType
from typing import Any

from cloudgpu.project import ROOT

KEYS = ("package", "image", "framework", "python", "default-cloud", "default-gpu", "logger")
FRAMEWORKS = ("pytorch", "tensorflow")


class ProjectError(SystemExit):
    """The project's [tool.cloudgpu] table is missing or wrong: invoke stops with one line (a
    SystemExit's message), not a traceback."""


def read_settings() -> dict[str, Any]:
    """[tool.cloudgpu] of ROOT/pyproject.toml, every key in KEYS present."""
    path = ROOT / "pyproject.toml"
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))["tool"]["cloudgpu"]
    except (OSError, KeyError, tomllib.TOMLDecodeError) as error:
        raise ProjectError(f"{path} has no readable [tool.cloudgpu] table ({error})") from None
    missing = [key for key in KEYS if not isinstance(table.get(key), str)]
    if missing:
        raise ProjectError(f"{path} [tool.cloudgpu] lacks {', '.join(missing)}")
    if table["framework"] not in FRAMEWORKS:
        choices = ", ".join(FRAMEWORKS)
        raise ProjectError(f"{path} [tool.cloudgpu] framework = {table['framework']!r}: {choices}")
    return table


SETTINGS = read_settings()
PACKAGE: str = SETTINGS["package"]  # python -m PACKAGE.train
IMAGE: str = SETTINGS["image"]  # the image's name
FRAMEWORK: str = SETTINGS["framework"]
# What the tasks do differently for it: its install, launch on several devices, package index.
framework: ModuleType = importlib.import_module(f"cloudgpu.tasks.frameworks.{FRAMEWORK}")
PYTHON_VERSION: str = SETTINGS["python"]  # the images' Python, and the locks'
DEFAULT_CLOUD: str = SETTINGS["default-cloud"]  # invoke train --cloud ... without a --cloud
DEFAULT_GPU: str = SETTINGS["default-gpu"]  # and without a --gpu
DEFAULT_LOGGER: str = SETTINGS["logger"]  # configs/train.yaml's
# The keys a logger reads from the environment: a cloud run has them only through [secrets].
LOGGER_KEYS: dict[str, tuple[str, ...]] = {
    logger: tuple(keys) for logger, keys in SETTINGS.get("logger-keys", {}).items()
}
