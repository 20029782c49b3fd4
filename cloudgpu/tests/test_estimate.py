"""invoke estimate's bad flags, answered in one line before anything is profiled (its model:
test_estimate_model.py; the whole command on a project's training: that project's
tests/test_estimate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from baked_project import invoke_cli, project_env


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes=0"], "--nodes must be at least 1"),
        (["--nodes=1,x"], "--nodes 'x' is not a whole number"),
        (["--cloud=mars"], "--cloud 'mars': choose from aws, gcp, azure, local, or all"),
        (["--gpu=t4"], "--gpu t4: a GPU's speed cannot be read from this machine's CPU"),
        (["--cloud=aws", "--machine=c7i.9xlarge"], "did you mean c7i."),
        (["--cloud=aws", "--machine=g4dn.xlarge"], "a GPU machine; estimates are for CPU"),
        (["--cloud=gcp", "--cpus=100000"], "no machine of gcp has 100000+ vCPUs"),
        (["--cloud=local", "--nodes=1,1000"], "local nodes share this machine's"),
        (["--threads=1000"], "--threads 1000: this machine has"),
    ],
)
def test_bad_flags_are_one_line_before_anything_is_profiled(
    args: list[str], message: str, tmp_path: Path
) -> None:
    done = invoke_cli("estimate", *args, env=project_env(ESTIMATE_PROFILES=str(tmp_path)))
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "profiling" not in done.stdout and list(tmp_path.iterdir()) == []
