"""The served model watched as a user runs it: `invoke serve` announces itself to `invoke
monitor`'s Prometheus, and every panel of monitoring/grafana/dashboards/serving.json has data.
Nothing here differs between frameworks (one of them runs it: SHARED_MODULES)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from cloudgpu.testing import services
from conftest import PROJECT_ROOT, project_env
from helpers.monitor_stack import Stack, listening, panel_queries, stack, wait

__all__ = ["stack"]  # the fixture, for pytest


@pytest.mark.slow
@pytest.mark.needs("prometheus")
def test_invoke_monitor_scrapes_invoke_serve_and_every_serving_panel_has_data(
    stack: Stack, short_run: Path, tmp_path: Path
) -> None:
    """`invoke serve` announces itself where `invoke monitor` looks; a few requests (one of
    them bad) later, every query of the serving dashboard returns data. Ctrl-C takes the
    announcement back."""
    from {{ cookiecutter.package_name }} import export as exporting

    run = Path(shutil.copytree(short_run, tmp_path / "served"))
    model = exporting.export(str(run))
    port, targets = services.free_port(), stack.folder / "targets"
    process = subprocess.Popen(
        [sys.executable, "-m", "invoke", "serve", "--model", str(model), "--port", str(port),
         "--announce", str(targets)],
        cwd=PROJECT_ROOT, env=project_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        wait(lambda: listening(port), "the server")
        assert [json.loads(p.read_text()) for p in targets.glob("serve-*.json")] == [
            [{"targets": [f"127.0.0.1:{port}"], "labels": {"served": "served"}}]
        ]
        with np.load(model / "parity.npz") as batch:
            inputs = batch["x"][:4].tolist()

        def traffic() -> None:
            for body in ({"instances": inputs}, {"instances": [[1.0]]}):
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/invocations", json.dumps(body).encode(),
                    {"Content-Type": "application/json"},
                )  # fmt: skip
                with contextlib.suppress(urllib.error.HTTPError):
                    urllib.request.urlopen(request, timeout=30).close()

        queries = list(panel_queries("serving.json", instance=f"127.0.0.1:{port}"))
        deadline = time.monotonic() + 120
        while empty := [(title, q) for title, q in queries if not stack.query(q)]:
            assert time.monotonic() < deadline, f"panels without data: {empty}"
            traffic()
            time.sleep(0.25)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        process.communicate(timeout=60)
    assert list(targets.glob("serve-*.json")) == []
