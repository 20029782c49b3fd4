"""What the Docker benchmarks share with each other and with the tests: a BuildKit client, the
stand-in base image (tests/helpers/engine.py), the CPU torch wheel, and `invoke build --cpu` on
that base. Each stops the benchmark with the reason when the machine lacks it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TEMPLATE_DIR))
sys.path.insert(0, str(TEMPLATE_DIR / "tests"))  # the Docker helpers the tests use

from helpers import engine  # noqa: E402

from template_tools import bake  # noqa: E402

__all__ = ["TEMPLATE_DIR", "bake", "build_command", "engine", "engine_and_base", "torch_wheels"]


def engine_and_base() -> tuple[str, str]:
    """The Docker client that builds with BuildKit, and the stand-in base (made once)."""
    client = engine.docker_client()
    if client is None:
        sys.exit("no Docker engine answers a client that builds with BuildKit")
    return client, engine.build_stand_in(client)


@contextlib.contextmanager
def torch_wheels(client: str) -> Iterator[str]:
    """pip's --find-links for the CPU torch wheel ("" where PyTorch's index answers)."""
    with engine.torch_find_links(client) as links:
        if links is None:
            sys.exit(f"{engine.CPU_TORCH_INDEX_HOST} is unreachable and no local torch+cpu wheel")
        yield links


def build_command(base: str, links: str) -> list[str]:
    """`invoke build --cpu` of a baked project, on `base`."""
    return [
        sys.executable, "-m", "invoke", "build", "--cpu", "--base-image", base,
        "--python", engine.STAND_IN_PYTHON, *(["--find-links", links] if links else []),
    ]  # fmt: skip
