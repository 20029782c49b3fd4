"""What live metrics cost a training step: the generated project's Trainer on its default model
(the MLP on digits, batch 64) with `monitoring=none` against `monitoring=prometheus` while a
scraper reads /metrics every second (Prometheus's default is 15 s; one second is harsh).

Two views side by side, both measured in this run:
- end to end: Trainer steps per wall second and per CPU second, the two settings alternating
  round by round (medians); the share is prometheus / none.
- by part: the per-batch hook (`LiveMetrics.batch`, timed over a million calls) and one scrape
  (collecting and formatting /metrics), as a share of the measured step time. Target: under 1%.

    invoke bench monitoring          (PyTorch)
    invoke bench monitoring-keras    (TensorFlow)
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import tempfile
import threading
import time
import timeit
import urllib.request
from pathlib import Path
from typing import Any

from overhead import load_project


def compose(project: Path, *overrides: str) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(project / "configs"), version_base="1.3"):
        return hydra_compose("train", overrides=list(overrides), return_hydra_config=False)


def one_fit(
    package: str, cfg: Any, splits: Any, rt: Any, port: int | None
) -> tuple[int, float, float]:
    """Train once; (optimizer steps, wall seconds, CPU seconds). With `port`, a scraper reads
    /metrics every second throughout."""
    fit = importlib.import_module(f"{package}.training.fit")
    exporter = importlib.import_module(f"{package}.tracking.exporter")
    loop = importlib.import_module(f"{package}.training.loop")
    signals = importlib.import_module(f"{package}.training.signals")
    tracking = importlib.import_module(f"{package}.tracking.trackers")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        metrics = exporter.start(cfg.monitoring, run_dir, 0, 0, job="bench")
        tracker = tracking.start(run_dir, {}, {}, enabled=True, live=metrics)
        trainer = loop.Trainer(fit.parts(cfg, splits, {}), rt, tracker, run_dir / "checkpoints")
        done = threading.Event()
        scraper = threading.Thread(target=_scrape, args=(port, done), daemon=True)
        if port is not None:
            scraper.start()
        started, started_cpu = time.perf_counter(), time.process_time()
        with signals.GracefulStop() as stop:
            trainer.fit(splits, stop)
        wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
        done.set()
        if port is not None:
            scraper.join()
        tracker.close()
        metrics.close(0)
        return trainer.progress.global_step, wall, cpu


def _scrape(port: int, done: threading.Event) -> None:
    while not done.wait(1.0):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()


def part_costs(package: str, cfg: Any) -> tuple[float, float]:
    """Seconds per `batch()` call and per scrape, timed on their own."""
    exporter = importlib.import_module(f"{package}.tracking.exporter")
    with tempfile.TemporaryDirectory() as tmp:
        metrics = exporter.start(cfg.monitoring, Path(tmp) / "run", 0, 0, job="bench")
        metrics.observe({"train/loss": 0.5, "train/lr": 1e-3, "val/loss": 0.4, "epoch": 3})
        calls = 1_000_000
        per_batch = timeit.timeit(lambda: metrics.batch(64, True), number=calls) / calls
        url = f"http://127.0.0.1:{cfg.monitoring.port}/metrics"
        scrapes = 200
        per_scrape = timeit.timeit(lambda: urllib.request.urlopen(url).read(), number=scrapes)
        metrics.close(0)
    return per_batch, per_scrape / scrapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--port", type=int, default=19464)
    parser.add_argument("--project", type=Path, required=True, help="a baked project")
    args = parser.parse_args()
    project = args.project.resolve()
    package = load_project(project)
    schema = importlib.import_module(f"{package}.config.schema")
    schema.register()
    common = [
        "logger=jsonl", f"trainer.max_epochs={args.epochs}", "trainer.device=cpu",
        "trainer.progress_bar=false", "callbacks.early_stopping=null",
        "monitoring.targets_dir=null", f"monitoring.port={args.port}",
    ]  # fmt: skip
    configs = {
        "monitoring=none": compose(project, *common, "monitoring=none"),
        "monitoring=prometheus": compose(project, *common, "monitoring=prometheus"),
    }
    data = importlib.import_module(f"{package}.data.sources")
    runtime = importlib.import_module(f"{package}.training.runtime")
    splits = data.load(configs["monitoring=none"].data)
    rt = runtime.start("cpu")
    wall: dict[str, list[float]] = {name: [] for name in configs}
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    for round_ in range(args.rounds + 1):  # round 0 warms up and is dropped
        for name, cfg in configs.items():
            port = args.port if cfg.monitoring.enabled else None
            steps, seconds, cpu_seconds = one_fit(package, cfg, splits, rt, port)
            if round_:
                wall[name].append(steps / seconds)
                cpu[name].append(steps / cpu_seconds)
    runtime.stop(rt)
    base, ours = "monitoring=none", "monitoring=prometheus"
    print(f"\n{package}: MLP on digits, batch 64, {args.epochs} epochs x {args.rounds} rounds; "
          "medians; share = prometheus / none")  # fmt: skip
    print(f"{'setting':<24} {'steps/s':>9} {'share':>7} {'steps/CPU-s':>12} {'share':>7}")
    for name in configs:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        shares = ("", "") if name == base else (
            f"{w / statistics.median(wall[base]):.3f}", f"{c / statistics.median(cpu[base]):.3f}"
        )  # fmt: skip
        print(f"{name:<24} {w:>9.1f} {shares[0]:>7} {c:>12.1f} {shares[1]:>7}")
    step_s = 1 / statistics.median(wall[base])
    per_batch, per_scrape = part_costs(package, configs[ours])
    scrape_share_1s = per_scrape / 1.0  # one scrape per second of training
    print(f"\nby part, against the measured step time of {step_s * 1e6:.0f} us:")
    print(f"  batch() per step     {per_batch * 1e6:8.2f} us   {per_batch / step_s:8.4%} of a step")
    print(f"  one scrape           {per_scrape * 1e6:8.0f} us   {scrape_share_1s:8.4%} of each "
          "second at 1 s scrapes (Prometheus's default 15 s: a fifteenth)")  # fmt: skip
    total = per_batch / step_s + scrape_share_1s
    print(f"  together             {'':8}      {total:8.4%}   target: under 1%")


if __name__ == "__main__":
    main()
