"""TensorFlow's C++ start-up notices, kept out of a run's output.

TF_CPP_MIN_LOG_LEVEL=2 hides TensorFlow's own INFO and WARNING lines, but since TF 2.16 a few of
them are written through absl before that setting is read (tensorflow/tensorflow#100442): "All
log messages before absl::InitializeLog() ..." and, on CPUs where oneDNN is on, "oneDNN custom
operations are on", twice. They come while `import tensorflow` runs, so that import alone has its
standard error caught, and whatever else it wrote (a Python warning, an error) is passed on.
TF_CPP_MIN_LOG_LEVEL=0 in your environment shows everything.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

NOTICES = re.compile(
    r"absl::InitializeLog\(\)|oneDNN custom operations are on|cpu_feature_guard"
    r"|^To enable the following instructions:"
)


@contextmanager
def notices_dropped() -> Iterator[None]:
    """Catch file descriptor 2 (C++ and Python alike); pass on every line but NOTICES."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines = caught.read().decode(errors="replace").splitlines(keepends=True)
            sys.stderr.write("".join(line for line in lines if not NOTICES.search(line)))
            sys.stderr.flush()


class _QuietLoader(importlib.abc.Loader):
    """TensorFlow's own loader, its module run inside notices_dropped()."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with notices_dropped():
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:  # resources, source: as the real loader answers
        return getattr(self._loader, name)


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds `tensorflow` once, as the other finders would, and hands back a quiet loader."""

    def find_spec(
        self, name: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


def install() -> None:
    """Quiet the first `import tensorflow` of this process, unless it has happened already or
    TF_CPP_MIN_LOG_LEVEL=0 asks for every line."""
    if "tensorflow" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0":
        return
    if not any(isinstance(finder, _QuietFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _QuietFinder())
