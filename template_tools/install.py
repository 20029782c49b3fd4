"""Installing a baked project into a virtual environment, as its own `invoke setup --cpu` and
its CI do; and the environment uv needs behind a TLS proxy. Standard library only."""

from __future__ import annotations

import os
import re
import socket
import tomllib
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

# torch==X from PyPI is the CUDA build on Linux (several GB); this index has the CPU build.
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# uv ignores pip's configuration; behind a TLS proxy it needs the system's CA bundle.
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def venv_python(venv: Path) -> Path:
    """The Python interpreter of the virtual environment at `venv`."""
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def cpu_torch_index() -> list[str]:
    """pip arguments that add PyTorch's CPU index, or none where that host does not resolve.

    Without the index pip would take the CUDA build of torch; with an unreachable one it retries
    every package for minutes (a machine with a local mirror that serves the CPU build).
    """
    try:
        socket.getaddrinfo(urlsplit(CPU_TORCH_INDEX).hostname, 443)
    except OSError:
        print(f"note: {CPU_TORCH_INDEX} is unreachable; pip uses its configured indexes only")
        return []
    return ["--extra-index-url", CPU_TORCH_INDEX]


def _depends_on_torch(project: Path) -> bool:
    """Whether the generated `project` lists torch among its dependencies."""
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return any(re.match(r"torch\b", dependency) for dependency in meta["dependencies"])


def project_install_command(
    python: Path, project: Path, extras: Sequence[str] = ("dev",)
) -> list[str]:
    """The pip command that installs `project` editable with `extras`, CPU PyTorch included.

    The same install as the generated project's `invoke setup --cpu` and its CI.
    """
    index = cpu_torch_index() if _depends_on_torch(project) else []
    target = f"{project}[{','.join(extras)}]"
    return [str(python), "-m", "pip", "install", *index, "-e", target]


def uv_environment() -> dict[str, str]:
    """SSL_CERT_FILE for uv, pointing at the system's CA bundle, unless already set."""
    if "SSL_CERT_FILE" not in os.environ and CA_BUNDLE.exists():
        return {"SSL_CERT_FILE": str(CA_BUNDLE)}
    return {}
