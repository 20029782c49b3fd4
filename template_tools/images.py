"""The CUDA/cuDNN matrix (images/matrix.json): look-ups, and what a baked project takes from it.

Standard library only: the post-generation hook calls write_image_defaults() under the Python
that runs cookiecutter or cruft.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from template_tools.frameworks import frameworks

IMAGES = Path(__file__).resolve().parent.parent / "images"
MATRIX = IMAGES / "matrix.json"
# The Python stage both kinds of image start with, written once, and the line it replaces.
PYTHON_STAGE = IMAGES / "python-stage.Dockerfile"
PYTHON_STAGE_MARKER = "# python stage: images/python-stage.Dockerfile"
# nvidia/cuda:13.0.3-base-ubuntu24.04 -> CUDA 13.0.3, flavour base, Ubuntu 24.04
CUDA_TAG = re.compile(
    r"^nvidia/cuda:(?P<cuda>\d+\.\d+\.\d+)-(?P<flavour>base|runtime|cudnn-runtime)"
    r"-ubuntu(?P<ubuntu>\d\d\.\d\d)$"
)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# The line of the project's Dockerfile that takes its default from the matrix.
BASE_ARG = "ARG BASE_IMAGE"
CUDA_PINS = Path("requirements") / "cuda.txt"
CLOUD_IMAGE = Path("image.json")  # beside the Dockerfile: what a GPU must have to run it

Row = dict[str, Any]


@cache
def _matrix_file() -> dict[str, Any]:
    return json.loads(MATRIX.read_text(encoding="utf-8"))


def matrix() -> list[Row]:
    """Every row of images/matrix.json, in file order."""
    return _matrix_file()["rows"]


def min_compute_capability(cuda: str) -> str:
    """The oldest GPU compute capability CUDA `cuda` (major.minor) still runs on."""
    return _matrix_file()["cuda_compute_capability"]["minimum"][cuda.split(".")[0]]


def row(row_id: str) -> Row:
    """The row called `row_id`; KeyError naming the known ids otherwise."""
    for found in matrix():
        if found["id"] == row_id:
            return found
    known = ", ".join(found["id"] for found in matrix())
    raise KeyError(f"no row {row_id!r} in {MATRIX.name}; the rows are: {known}")


def offered_row(framework: str) -> Row:
    """The row of the release that the `framework` choice pins (template_tools/frameworks.json)."""
    version = frameworks()[framework]["version"]
    for found in matrix():
        if found["framework"] == framework and found["version"] == version:
            return found
    raise LookupError(f"{MATRIX.name} has no row for {framework} {version}")


def base_reference(chosen: Row) -> str:
    """`tag@digest`, or the bare tag where the row has no verified digest."""
    digest = chosen.get("digest")
    return f"{chosen['base_image']}@{digest}" if digest else chosen["base_image"]


def default_base(chosen: Row) -> str:
    """What a project's image builds on by default: the template's published Python base for the
    row (NVIDIA's base with Python, pinned by digest), where one is recorded; else NVIDIA's."""
    published = chosen.get("python_base")
    if published and published.get("digest"):
        return f"{published['image']}@{published['digest']}"
    return base_reference(chosen)


def with_python_stage(dockerfile: str) -> str:
    """`dockerfile` with its marker line replaced by images/python-stage.Dockerfile."""
    lines = dockerfile.split("\n")
    if lines.count(PYTHON_STAGE_MARKER) != 1:
        raise ValueError(f"a Dockerfile needs exactly one line {PYTHON_STAGE_MARKER!r}")
    stage = PYTHON_STAGE.read_text(encoding="utf-8").rstrip("\n")
    return "\n".join(stage if line == PYTHON_STAGE_MARKER else line for line in lines)


def cuda_of_tag(tag: str) -> str:
    """The CUDA major.minor of an nvidia/cuda tag: nvidia/cuda:13.0.3-base-ubuntu24.04 -> 13.0."""
    match = CUDA_TAG.match(tag)
    if not match:
        raise ValueError(f"{tag!r} is not an nvidia/cuda:X.Y.Z-<flavour>-ubuntuNN.NN tag")
    return ".".join(match["cuda"].split(".")[:2])


def _base_comment(chosen: Row) -> str:
    lines = [
        f"# Default base: the template's images/matrix.json, row {chosen['id']}: the",
        f"# {chosen['package']} {chosen['version']} wheels carry CUDA {chosen['cuda']} and cuDNN "
        f"{chosen['cudnn']}; the host needs a driver >= {chosen['min_driver']}.",
    ]
    if default_base(chosen) != base_reference(chosen):
        text = (
            f"It is the template's Python base: {chosen['base_image']} with Python, built and "
            "smoke-tested by the template's CI. `invoke build --base-image "
            f"{base_reference(chosen)}` builds on NVIDIA's base instead (the stage below then "
            "installs Python from Ubuntu's archive)."
        )
    elif chosen.get("digest"):
        text = (
            "It is NVIDIA's base (the template has published no Python base for this row yet); "
            "the stage below installs Python on it from Ubuntu's archive."
        )
    else:
        text = f"Not pinned by digest: {chosen['digest_missing']}."
    lines += textwrap.wrap(text, width=98, initial_indent="# ", subsequent_indent="# ")
    return "\n".join(lines)


def write_image_defaults(project_dir: Path, answers: Mapping[str, Any]) -> None:
    """Fill what the project's image takes from the matrix row of the chosen framework.

    The Dockerfile gets the Python stage and its `ARG BASE_IMAGE` a default (the pinned base,
    with a comment saying where it comes from), and requirements/cuda.txt lists the CUDA wheels
    that `invoke lock` holds the GPU lock to.
    """
    chosen = offered_row(answers["framework"])
    dockerfile = Path(project_dir) / "Dockerfile"
    lines = with_python_stage(dockerfile.read_text(encoding="utf-8")).split("\n")
    if lines.count(BASE_ARG) != 1:
        raise ValueError(f"{dockerfile} needs exactly one line {BASE_ARG!r} to fill")
    at = lines.index(BASE_ARG)
    lines[at] = f"{_base_comment(chosen)}\n{BASE_ARG}={default_base(chosen)}"
    dockerfile.write_text("\n".join(lines), encoding="utf-8")
    pins = [
        "# The CUDA libraries of the GPU image: the wheels "
        f"{chosen['package']} {chosen['version']} was built against",
        f"# (CUDA {chosen['cuda']}, cuDNN {chosen['cudnn']}), from the template's "
        "images/matrix.json.",
        "# `invoke lock` holds requirements/gpu.txt to these versions.",
        *chosen["cuda_wheels"],
    ]
    (Path(project_dir) / CUDA_PINS).write_text("\n".join(pins) + "\n", encoding="utf-8")
    needs = {
        "about": "What the project's GPU image needs of a machine: the template's "
        f"images/matrix.json row {chosen['id']}, written when the project was made. "
        "`invoke train --cloud` checks it against the cloudgpu catalog before it starts one.",
        "row": chosen["id"],
        "cuda": chosen["cuda"],
        "min_driver": chosen["min_driver"],
        "min_compute_capability": min_compute_capability(chosen["cuda"]),
    }
    (Path(project_dir) / CLOUD_IMAGE).write_text(json.dumps(needs, indent=2) + "\n", "utf-8")
