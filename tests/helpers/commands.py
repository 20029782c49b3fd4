"""Commands as a user types them, run by the tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def invoke(
    cwd: Path, *args: str, timeout: int = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """`invoke ARGS` in `cwd` with this Python, `env` added to the environment; output captured."""
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
