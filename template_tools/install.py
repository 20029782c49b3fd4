"""Installing a baked project into a virtual environment, as its own `invoke setup --cpu` and
its CI do; and uv installs that find packages where pip's configuration says (a mirror, a
wheelhouse, a constraints file), for the test tools' venvs. Standard library only.

    python -m template_tools.install VENV PACKAGE...   uv pip install into VENV
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
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


def depends_on_torch(project: Path) -> bool:
    """Whether the generated `project` lists torch among its dependencies."""
    meta = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return any(re.match(r"torch\b", dependency) for dependency in meta["dependencies"])


def project_install_command(
    python: Path, project: Path, extras: Sequence[str] = ("dev",)
) -> list[str]:
    """The pip command that installs `project` editable with `extras`, CPU PyTorch included.

    The same install as the generated project's `invoke setup --cpu` and its CI.
    """
    index = cpu_torch_index() if depends_on_torch(project) else []
    target = f"{project}[{','.join(extras)}]"
    return [str(python), "-m", "pip", "install", *index, "-e", target]


def uv_environment() -> dict[str, str]:
    """SSL_CERT_FILE for uv, pointing at the system's CA bundle, unless already set."""
    if "SSL_CERT_FILE" not in os.environ and CA_BUNDLE.exists():
        return {"SSL_CERT_FILE": str(CA_BUNDLE)}
    return {}


# pip's settings that say where packages come from, and uv's flag for each: uv reads no pip.conf.
PIP_SOURCES = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
# pip's switches uv has too: `--no-index` (PIP_NO_INDEX=1) leaves the find-links folders only.
PIP_SWITCHES = {"no-index": "--no-index"}
# Which of `pip config list`'s sections pip obeys first: an environment variable replaces a file's.
PIP_SECTIONS = (":env:", "install", "global")


def uv_sources(config_list: str) -> list[str]:
    """uv arguments for the package sources in `pip config list`'s output (`section.key='value'`
    lines; a value may list several, space-separated), each key from the section pip obeys.

    uv's own default takes a package from the first index that has it; pip takes the best version
    from any source (torch's CPU build from a wheelhouse over PyPI's), and so does this.
    """
    found: dict[str, dict[str, list[str]]] = {}
    for line in config_list.splitlines():
        name, equals, value = line.partition("=")
        section, _, key = name.strip().rpartition(".")
        if equals and (key in PIP_SOURCES or key in PIP_SWITCHES):
            found.setdefault(key, {})[section] = shlex.split(value)[0].split() if value else []
    arguments = []
    for key, flag in PIP_SOURCES.items():
        for item in _obeyed(found.get(key, {})):
            arguments += [flag, item]
    for key, flag in PIP_SWITCHES.items():
        if _obeyed(found.get(key, {})) in (["1"], ["true"], ["yes"], ["on"]):
            arguments.append(flag)
    return [*arguments, "--index-strategy", "unsafe-best-match"] if arguments else arguments


def _obeyed(sections: dict[str, list[str]]) -> list[str]:
    """The value from the section pip obeys first, of those that set it."""
    return next((sections[name] for name in PIP_SECTIONS if name in sections), [])


def uv_install_command(python: Path, packages: Sequence[str]) -> list[str]:
    """`uv pip install` of `packages` into the venv of `python`, from pip's configured sources.

    For the tests' venvs (seconds, where pip takes minutes); a user's install is pip's, as the
    project's README says, and `invoke demo` runs it.
    """
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    # Compiled, as pip compiles: the tests run with PYTHONDONTWRITEBYTECODE=1, so a module left
    # as source is compiled again by every process that imports it (torch: seconds each time).
    return [
        *(sys.executable, "-m", "uv", "pip", "install", "--quiet", "--compile-bytecode"),
        *("--python", str(python)),
        *uv_sources(listed),
        *packages,
    ]


def main(argv: Sequence[str]) -> int:
    """uv pip install PACKAGE... into the existing venv VENV."""
    if len(argv) < 2:
        print("usage: python -m template_tools.install VENV PACKAGE...", file=sys.stderr)
        return 2
    command = uv_install_command(venv_python(Path(argv[0])), argv[1:])
    return subprocess.run(command, env={**os.environ, **uv_environment()}).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
