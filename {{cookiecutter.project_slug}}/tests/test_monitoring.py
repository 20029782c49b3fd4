"""Live metrics (`monitoring=prometheus`), watched by a real Prometheus, Pushgateway and
node_exporter that `invoke monitor` starts as a user starts them: the step counter rises, the loss
falls, samples/s is positive, every dashboard panel's query returns data, and the final push
arrives, after SIGTERM and after a clean finish. promtool checks the exposition, the generated
config and the alert rules, and fires each alert on synthetic series (monitoring/alerts_test.yml).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from cloudgpu.testing import services
from conftest import PROJECT_ROOT, SHORT, invoke_cli, module_command, project_env, run_module
from helpers.monitor_stack import DASHBOARDS, Stack, listening, panel_queries, stack, wait
from omegaconf import OmegaConf

from {{ cookiecutter.package_name }}.tracking import live as live_module
from {{ cookiecutter.package_name }}.tracking.exporter import start
from {{ cookiecutter.package_name }}.tracking.live import LiveMetrics, NoLiveMetrics

MONITORING = PROJECT_ROOT / "monitoring"
__all__ = ["stack"]  # the fixture, for pytest


def _monitored(stack: Stack, port: int) -> list[str]:
    return [
        "logger=jsonl", "monitoring=prometheus", f"monitoring.port={port}",
        f"monitoring.pushgateway={stack.pushgateway}",
        f"monitoring.targets_dir={stack.folder / 'targets'}",
    ]  # fmt: skip


def _labels(**labels: str) -> str:
    """A PromQL (and exposition) label set: {run="x",split="y"}."""
    return "{" + ",".join(f'{name}="{value}"' for name, value in labels.items()) + "}"


def _values(series: list[dict]) -> list[float]:
    assert len(series) == 1, series
    return [float(value) for _, value in series[0]["values"]]


@pytest.mark.slow
@pytest.mark.needs("prometheus")
def test_prometheus_watches_a_run_live_and_the_pushgateway_keeps_its_end(
    stack: Stack, tmp_path: Path
) -> None:
    port, run = services.free_port(), "watched"
    # A slow, constant learning rate: the loss still falls minutes in, rather than wandering
    # around its minimum after a few epochs (a batch's loss there goes up as often as down).
    command = module_command(
        "train", *_monitored(stack, port), "trainer.max_epochs=5000", "trainer.log_every_n_steps=1",
        "scheduler=constant", "optimizer.lr=3e-5", "callbacks.early_stopping=null",
        "callbacks.checkpoint.min_interval_s=0", f"hydra.run.dir={tmp_path / run}",
    )  # fmt: skip
    training = subprocess.Popen(
        command, cwd=PROJECT_ROOT, env=project_env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        selector = _labels(run=run)
        # Four scrapes of a run past its third epoch (discovery may come late on a busy machine).
        wait(
            lambda: (
                stack.query(f"count_over_time(train_steps_total{selector}[2m]) >= 4")
                and stack.query(f"train_epoch{selector} >= 3")
            ),
            "four scrapes and three epochs in Prometheus",
        )
        steps = _values(stack.query_range(f"train_steps_total{selector}", 120))
        assert steps[-1] > steps[0] and steps == sorted(steps), steps
        # The validation loss (the whole split, no dropout) over twenty epochs Prometheus saw.
        first_epoch = _values(stack.query_range(f"train_epoch{selector}", 120))[0]
        wait(lambda: stack.query(f"train_epoch{selector} >= {first_epoch + 20}"), "20 epochs")
        loss = _values(stack.query_range("train_loss" + _labels(run=run, split="val"), 120))
        assert loss[-1] < loss[0], loss
        assert stack.query(f"max_over_time(train_samples_per_second{selector}[1m]) > 0")
        exposition = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read()
        lint = subprocess.run(["promtool", "check", "metrics"], input=exposition,
                              capture_output=True)  # fmt: skip
        assert lint.returncode == 0, lint.stdout + lint.stderr
        # No GPU here: a GPU run's series, pushed as a stand-in, so the GPU panels have data.
        if not stack.query(f"train_gpu_utilization_ratio{selector}"):
            _push_gpu_stand_in(stack, run)
        wait(lambda: stack.query(f"train_gpu_utilization_ratio{selector}"), "the stand-in")
        # A scrape that timed out on a busy machine leaves an instant query empty until the
        # next one: ask again for a minute before calling a panel empty.
        deadline = time.monotonic() + 60
        while empty := [
            (title, q) for title, q in panel_queries("training.json", run=run) if not stack.query(q)
        ]:
            if time.monotonic() > deadline:
                break
            time.sleep(1)
        assert empty == [], f"panels without data: {empty}"
        target_files = list((stack.folder / "targets").glob(f"{run}-*.json"))
        assert len(target_files) == 1
    finally:
        training.send_signal(signal.SIGTERM)
        output = training.communicate(timeout=120)[0]
    assert training.returncode == 128 + signal.SIGTERM, output
    assert not target_files[0].exists(), "the run's announcement outlived it"
    stopped = _group(stack, run)
    assert stopped["train_exit_code"] == 128 + signal.SIGTERM
    assert "train_last_success_timestamp_seconds" not in stopped
    assert stopped["train_steps_total"] >= steps[-1]

    done = run_module(
        "train", *SHORT, *_monitored(stack, port), f"hydra.run.dir={tmp_path / 'done'}"
    )
    assert done.returncode == 0, done.stdout
    finished = _group(stack, "done")
    assert finished["train_exit_code"] == 0
    assert finished["train_last_success_timestamp_seconds"] > time.time() - 600
    assert "test/accuracy" in (tmp_path / "done" / "metrics.json").read_text()
    # Prometheus scrapes the gateway with the pushed labels kept (honor_labels).
    wait(lambda: stack.query('train_last_success_timestamp_seconds{run="done"}'), "the push")


def _group(stack: Stack, run: str) -> dict[str, float]:
    """What the run pushed: metric name -> the value of its first series (histograms left out)."""
    for group in stack.pushed():
        if group["labels"].get("run") == run:
            return {
                name: float(family["metrics"][0]["value"])
                for name, family in group.items()
                if isinstance(family, dict) and "value" in (family.get("metrics") or [{}])[0]
            }
    raise AssertionError(f"no push of run {run}: {stack.pushed()}")


def _push_gpu_stand_in(stack: Stack, run: str) -> None:
    body = "".join(
        f"{name}{_labels(run=run, rank='0', gpu='0')} {value}\n"
        for name, value in (
            ("train_gpu_utilization_ratio", 0.9),
            ("train_gpu_memory_used_bytes", 2e9),
            ("train_gpu_memory_total_bytes", 16e9),
        )
    )
    request = urllib.request.Request(
        f"{stack.pushgateway}/metrics/job/gpu-stand-in", data=body.encode(), method="PUT"
    )
    urllib.request.urlopen(request, timeout=10).close()


@pytest.mark.needs("prometheus")
def test_alert_rules_check_and_fire_on_synthetic_series() -> None:
    for command in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        done = subprocess.run(
            ["promtool", *command], cwd=MONITORING, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
    rules = OmegaConf.load(MONITORING / "alerts.yml")
    tested = OmegaConf.load(MONITORING / "alerts_test.yml")
    names = {rule.alert for group in rules.groups for rule in group.rules}
    firing = {
        case.alertname for test in tested.tests for case in test.alert_rule_test if case.exp_alerts
    }
    assert names == firing == {
        "TrainingStalled", "GpuIdleWhileTraining", "CheckpointStale",
        "ServingErrors", "ServingSlow", "PredictionDrift", "InputDrift",
    }  # fmt: skip


@pytest.mark.needs("prometheus")
def test_the_dry_run_prints_a_config_promtool_accepts(tmp_path: Path) -> None:
    done = invoke_cli("monitor", "--dry-run", f"--folder={tmp_path / 'm'}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "m").exists(), "a dry run writes nothing"
    config, _, commands = done.stdout.partition("\n}\n")
    (tmp_path / "prometheus.yml").write_text(config + "\n}\n")
    check = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    rules = OmegaConf.load(MONITORING / "alerts.yml")
    count = sum(len(group.rules) for group in rules.groups)  # training's and serving's
    assert f"SUCCESS: {count} rules found" in check.stdout and count == 7
    assert "--web.listen-address=127.0.0.1:9090" in commands


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "nine"], "--port 'nine' is not a whole number"),
        (["--node-port", "70000"], "--node-port 70000: a port goes up to 65535"),
        (["--pushgateway-port", "9090"], "the three ports must differ"),
        (["--scrape-interval", "5x"], "--scrape-interval '5x': give a duration such as 250ms"),
    ],
)
def test_invoke_monitor_refuses_bad_flags_in_one_line(
    flags: list[str], message: str, tmp_path: Path
) -> None:
    done = invoke_cli("monitor", *flags, f"--folder={tmp_path / 'm'}")
    assert done.returncode == 2 and message in done.stderr, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "m").exists()


def test_invoke_monitor_names_what_is_missing_and_installs_nothing(tmp_path: Path) -> None:
    done = invoke_cli("monitor", f"--folder={tmp_path / 'm'}", env=project_env(PATH=str(tmp_path)))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "prometheus (install: sudo apt-get install prometheus)" in done.stderr
    assert "node_exporter (install:" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "m").exists()
    # A dry run needs none of them: it prints the plan, naming what a real start needs first.
    dry = invoke_cli("monitor", "--dry-run", f"--folder={tmp_path / 'm'}",
                     env=project_env(PATH=str(tmp_path)))  # fmt: skip
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "# not found on PATH: prometheus (install: sudo apt-get install" in dry.stdout
    assert "prometheus --config.file=" in dry.stdout and not (tmp_path / "m").exists()


def test_the_dashboards_use_the_provisioned_data_source() -> None:
    provisioned = OmegaConf.load(MONITORING / "grafana/provisioning/datasources/prometheus.yml")
    uid = provisioned.datasources[0].uid
    dashboards = sorted(DASHBOARDS.glob("*.json"))
    assert dashboards
    for path in dashboards:
        text = path.read_text()
        assert "${DS_" not in text, f"{path.name}: a placeholder file provisioning won't fill"
        for panel in json.loads(text)["panels"]:
            sources = [panel["datasource"], *(t["datasource"] for t in panel["targets"])]
            assert {s["uid"] for s in sources} == {uid}, panel["title"]
            assert panel["targets"], panel["title"]


def test_rank_k_serves_on_port_plus_k_with_its_rank_label(tmp_path: Path) -> None:
    port = services.free_port()
    settings = OmegaConf.create(
        {"enabled": True, "host": "127.0.0.1", "port": port - 1, "pushgateway": None,
         "targets_dir": str(tmp_path / "targets")}
    )  # fmt: skip
    exporter = start(settings, tmp_path / "r", rank=3, local_rank=1, job="j")
    try:
        exporter.batch(8, optimizer_step=True)
        exporter.observe({"train/loss": 0.5, "val/accuracy": 0.75, "epoch": 2})
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        assert 'train_steps_total{rank="3",run="r"} 1.0' in text
        assert 'train_samples_total{rank="3",run="r"} 8.0' in text
        assert 'train_loss{rank="3",run="r",split="train"} 0.5' in text
        assert 'train_accuracy_ratio{rank="3",run="r",split="val"} 0.75' in text
        assert "train_gpu_" not in text, "no GPU here: no GPU series, not zeros"
        [target] = (tmp_path / "targets").iterdir()
        assert json.loads(target.read_text())[0]["targets"] == [f"127.0.0.1:{port}"]
    finally:
        exporter.close(0)
    assert not list((tmp_path / "targets").iterdir())
    assert not listening(port)


@pytest.mark.slow
def test_a_taken_port_stops_the_run_in_one_line_before_it_trains(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_module(
            "train", *SHORT, "monitoring=prometheus", f"monitoring.port={port}",
            f"hydra.run.dir={tmp_path / 'run'}",
        )  # fmt: skip
    assert done.returncode == 2, done.stdout
    lines = [line for line in done.stdout.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and f"monitoring.port={port}: cannot serve" in lines[0], done.stdout
    assert "Traceback" not in done.stdout
    assert not (tmp_path / "run").exists()


def test_monitoring_none_imports_no_prometheus_client() -> None:
    code = (
        "import sys; import {{ cookiecutter.package_name }}.train, "
        "{{ cookiecutter.package_name }}.training.fit, {{ cookiecutter.package_name }}.training.loop; "
        "print('prometheus_client' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_ROOT, env=project_env(),
                          capture_output=True, text=True)  # fmt: skip
    assert done.stdout.strip() == "False", done.stdout + done.stderr


@pytest.mark.slow
def test_a_tracker_that_cannot_start_leaves_no_announcement(tmp_path: Path) -> None:
    """The exporter starts before the trackers; when one of them fails to start, the run ends
    and takes its announcement with it: invoke monitor's Prometheus scrapes no dead target."""
    targets = tmp_path / "targets"
    done = run_module(
        "train", *SHORT, f"hydra.run.dir={tmp_path / 'run'}", "monitoring=prometheus",
        f"monitoring.port={services.free_port()}", f"monitoring.targets_dir={targets}",
        "+logger.broken._target_=no_such_module.Tracker",
    )  # fmt: skip
    assert done.returncode != 0
    assert "no_such_module" in done.stdout
    assert not targets.exists() or not list(targets.iterdir())


def test_a_second_reader_does_not_empty_the_samples_rate() -> None:
    """Two scrapers (or a scrape and the final push) read the same rate: reading moves nothing."""
    metrics = LiveMetrics("r", 0)
    for _ in range(20):
        metrics.batch(32, optimizer_step=True)
        time.sleep(0.01)
    first, second = metrics.samples_per_second(), metrics.samples_per_second()
    assert first > 1000  # 640 samples in about 0.2 s
    assert second > 0.9 * first


@pytest.mark.parametrize("kind", ["none", "prometheus"])
def test_throughput_counts_the_steps_alone_from_the_second_epoch(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """metrics.json's train_steps_per_second (with or without monitoring): the first epoch's
    warm-up and the pauses between epochs (validation, checkpoints) are left out."""
    clock = iter([0.0, 0.0, 5.0, 10.0, 100.0, 101.0, 102.0, 103.0])
    fake = types.SimpleNamespace(perf_counter=lambda: next(clock), time=time.time)
    monkeypatch.setattr(live_module, "time", fake)
    live = NoLiveMetrics() if kind == "none" else LiveMetrics("run", 0)
    live.epoch_started()  # 0: epoch 1, two steps of 5 s (warm-up)
    live.batch(32, True)
    live.batch(32, True)
    live.epoch_started()  # 100: epoch 2 after 90 s of validation, three steps of 1 s
    for _ in range(3):
        live.batch(32, True)
    assert live.throughput() == {"train_steps_per_second": 1.0, "train_samples_per_second": 32.0}
