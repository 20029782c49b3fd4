"""benchmarks/gpu.py, the GPU throughput table, runs as it will on a GPU machine: here on the
CPU, small, in fp32 and without {{ "XLA" if cookiecutter.framework == "tensorflow" else "torch.compile" }} (on a CPU both take minutes)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import PROJECT_ROOT, project_env


@pytest.mark.slow
def test_the_gpu_benchmark_prints_its_table_on_a_cpu() -> None:
    command = [sys.executable, "benchmarks/gpu.py", "--device=cpu", "--quick", "--compile=no",
               "--precision=fp32"]  # fmt: skip
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, env=project_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    rows = [line.split() for line in lines if line.startswith(("in memory", "streamed"))]
    assert len(rows) == 2, done.stdout
    for row in rows:
        bare, ours, share = float(row[-5]), float(row[-4]), float(row[-3])
        assert bare > 0 and ours > 0 and share == pytest.approx(ours / bare, rel=0.05)
        assert row[-2:] == ["n/a", "n/a"]  # no GPU to be busy
