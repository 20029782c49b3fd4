"""The project a command acts on: its cloud.toml, its image.json and its outputs/cloud/ records.

A project's tasks name their folder in CLOUDGPU_PROJECT before they import this package; without
it, the nearest folder up from the working directory that holds a cloud.toml.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLE = "CLOUDGPU_PROJECT"
MARKER = "cloud.toml"


def find_root() -> Path:
    """CLOUDGPU_PROJECT, else the nearest folder from here up with a cloud.toml, else here."""
    named = os.environ.get(VARIABLE)
    if named:
        return Path(named).resolve()
    here = Path.cwd().resolve()
    return next((folder for folder in (here, *here.parents) if (folder / MARKER).is_file()), here)


ROOT = find_root()
