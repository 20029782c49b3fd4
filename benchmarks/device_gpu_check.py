"""A generated project's GPU check (`invoke gpu-check --here`, benchmarks/gpu_check.py) on a lent
GPU machine that has PyTorch, NumPy and pytest but not Docker, the project's other packages or
a network. Made here, run there:

    python benchmarks/device_gpu_check.py      # here: .cache/device/ (a baked project, wheels)
    bash .cache/device/run.sh                  # there, from this folder, carrying .cache/device:
                                               # the report in $OUT/gpu-check/

The project is baked with the default answers but tracking=none (wandb is not there and the GPU
tests log to files). The wheels are those of its packages the machine lacks, for its Python.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TEMPLATE_DIR))

from template_tools import bake  # noqa: E402

DEVICE = TEMPLATE_DIR / ".cache" / "device"
ANSWERS = {"framework": "pytorch", "tracking": "none"}
# Imported by the training code and its GPU tests, missing from the lent machine's image (its
# package list: ../.library/device/KINDS.md), at the versions of the project's CPU lock;
# antlr4's runtime exists only as source, so its wheel is built here. invoke is a dev requirement
# (no lock holds it) that three test modules import, so pytest cannot collect without it.
WHEELS = ["hydra-core", "omegaconf", "tqdm"]
UNLOCKED = ["invoke==3.0.3"]
SOURCE_ONLY = ["antlr4-python3-runtime"]
RUN = """#!/usr/bin/env bash
# On the GPU machine: the wheels beside the machine's packages, then the project's GPU check.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python3 -m pip install --quiet --no-index --no-deps --no-compile --no-cache-dir \\
  --target /tmp/gpu-check-site "$here"/wheels/*.whl
export PYTHONPATH=/tmp/gpu-check-site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
echo "$(nproc) CPUs; C compiler: $(cc --version 2>/dev/null | head -1 || echo none)"
cd "$here/project"
python3 benchmarks/gpu_check.py --out "${OUT:-/tmp}/gpu-check"
"""


def locked(lock: Path) -> dict[str, str]:
    """name -> `name==version`, from a hash-locked requirements file."""
    pins = {}
    for line in lock.read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.startswith(("#", " ")):
            pin = line.split()[0]
            pins[pin.split("==")[0].lower()] = pin
    return pins


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-version", default="3.12", help="the GPU machine's Python")
    args = parser.parse_args()
    shutil.rmtree(DEVICE, ignore_errors=True)
    wheels = DEVICE / "wheels"
    wheels.mkdir(parents=True)
    project = bake(TEMPLATE_DIR, DEVICE, ANSWERS)
    project.rename(DEVICE / "project")
    pinned = locked(DEVICE / "project" / "requirements" / "cpu.txt")
    pip = [sys.executable, "-m", "pip", "--quiet"]
    subprocess.run(
        [*pip, "download", "--no-deps", "--only-binary=:all:", "--implementation=cp",
         f"--python-version={args.python_version}", "--platform=manylinux2014_x86_64",
         f"--dest={wheels}", *(pinned[name] for name in WHEELS), *UNLOCKED],
        check=True,
    )  # fmt: skip
    built = [pinned[name] for name in SOURCE_ONLY]
    subprocess.run([*pip, "wheel", "--no-deps", f"--wheel-dir={wheels}", *built], check=True)
    (DEVICE / "run.sh").write_text(RUN, encoding="utf-8")
    size = sum(path.stat().st_size for path in DEVICE.rglob("*") if path.is_file())
    print(f"{DEVICE}: {size / 2**20:.1f} MiB; on the GPU machine: bash .cache/device/run.sh")


if __name__ == "__main__":
    main()
