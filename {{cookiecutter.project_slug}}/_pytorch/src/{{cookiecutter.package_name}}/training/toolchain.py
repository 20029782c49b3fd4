"""What torch.compile needs from the machine, checked before a run makes anything
(config/resources.py): Inductor builds its CPU kernels with a C++ compiler ($CXX, else g++)
against Python.h, and on a GPU Triton builds its launcher with a C compiler ($CC, else gcc, else
clang) against the same. Without them the first compiled step ends the run in a long traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

# A Python extension in its smallest form, built as Triton builds its launcher.
PROBE = "#include <Python.h>\nint probe(void) { return Py_IsInitialized(); }\n"
INSTALL = (
    "install them (apt-get install g++ python3-dev) or train uncompiled (trainer.compile=false)"
)


def python_include() -> Path:
    """Where Python.h is, found as Triton finds it (Debian's posix_local scheme means prefix)."""
    scheme = sysconfig.get_default_scheme()
    scheme = "posix_prefix" if scheme == "posix_local" else scheme
    return Path(sysconfig.get_paths(scheme=scheme)["include"])


def compiler(on_gpu: bool) -> str | None:
    """The compiler torch.compile would use: Triton's C compiler on a GPU, Inductor's C++ one
    on the CPU; None when it is not on PATH."""
    if on_gpu:
        given = os.environ.get("CC")
        return shutil.which(given) if given else shutil.which("gcc") or shutil.which("clang")
    return shutil.which(os.environ.get("CXX", "g++"))


def compile_problem(on_gpu: bool) -> str | None:
    """Why torch.compile cannot work here, in one line ending in what to do; None when a shared
    object builds against Python.h (under a second)."""
    wanted = "a C compiler ($CC, gcc or clang)" if on_gpu else "a C++ compiler ($CXX or g++)"
    found = compiler(on_gpu)
    if found is None:
        return f"torch.compile needs {wanted} and Python's headers, and none is on PATH; {INSTALL}"
    header = python_include() / "Python.h"
    if not header.is_file():
        return f"torch.compile needs Python's headers, and {header} is missing; {INSTALL}"
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / ("probe.c" if on_gpu else "probe.cpp")
        source.write_text(PROBE)
        built = f"{scratch}/probe.so"
        command = [found, str(source), "-shared", "-fPIC", f"-I{header.parent}", "-o", built]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no output"])[0]
        return f"torch.compile's compiler {found} cannot build against {header} ({said}); {INSTALL}"
    return None
