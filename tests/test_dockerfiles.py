"""Every Dockerfile passes hadolint, and the project's orders its layers for fast rebuilds."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import TEMPLATE_DIR

from images.tasks import dockerfile

BASE_DOCKERFILE = TEMPLATE_DIR / "images" / "Dockerfile"  # the Python stage goes in at build
HADOLINT = Path(sys.executable).parent / "hadolint"


def hadolint(*paths: Path) -> subprocess.CompletedProcess[str]:
    assert HADOLINT.exists(), (
        "hadolint is missing: pip install --require-hashes -r requirements-dev.txt"
    )
    return subprocess.run(
        [str(HADOLINT), *map(str, paths)], capture_output=True, text=True, timeout=120
    )


def test_hadolint_passes_on_the_base_image() -> None:
    done = hadolint(dockerfile())  # images/Dockerfile as `invoke images.build` builds it
    assert done.returncode == 0, done.stdout + done.stderr
    assert dockerfile().read_text() != BASE_DOCKERFILE.read_text()


def test_hadolint_passes_on_every_baked_project(baked: dict[str, Path]) -> None:
    done = hadolint(*(project / "Dockerfile" for project in baked.values()))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_code_is_copied_last_and_runs_unprivileged(default_project: Path) -> None:
    runtime = (default_project / "Dockerfile").read_text().split(" AS runtime\n", 1)[1]
    # The instructions that make layers, and USER, in order.
    steps = re.findall(r"^(?:RUN|COPY|USER)\b.*$", runtime, re.MULTILINE)
    assert steps[-5:] == [
        "COPY --from=builder /opt/venv /opt/venv",
        "COPY --from=builder /opt/cloudgpu /opt/cloudgpu",  # checked there (in_image.py)
        "COPY configs configs",
        "COPY src src",
        "USER 1000:1000",
    ]
    assert re.search(r'^ENTRYPOINT \["dumb-init", "--", "python", "-m", "\w+\.train"\]$',
                     runtime, re.MULTILINE)  # fmt: skip
