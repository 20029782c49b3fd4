"""Live metrics for Prometheus (`monitoring=prometheus`): what a run is doing now, kept by every
process of the job and served by exporter.py.

The training loops call `batch()` once per batch: it adds to plain integers and a histogram
bucket, and nothing is formatted until Prometheus scrapes. Values that live on the device (losses,
the learning rate) come through `observe()` at the loops' own logging cadence, so monitoring adds
no wait for the device. With `monitoring=none` the loops get `NoLiveMetrics`, which only times the
steps (metrics.json's throughput), and prometheus_client is never imported.
"""

from __future__ import annotations

import bisect
import collections
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

# Seconds per optimizer step: from a tiny model on a CPU to a large one on a slow GPU.
RATE_WINDOW_S = 30  # train_samples_per_second: over about this many seconds
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class MonitoringError(Exception):
    """The exporter cannot start (its port is taken); one line, before training begins."""


class NoLiveMetrics:
    """monitoring=none: nothing is served; only the steps are timed, for metrics.json's
    throughput (a clock read per optimizer step)."""

    def __init__(self) -> None:
        self.steps = 0
        self.samples = 0
        self.step_seconds = 0.0
        self._last_step = time.perf_counter()
        self._first_epoch: tuple[int, int, float] | None = None  # steps, samples, seconds
        self._epochs = 0

    def batch(self, samples: int, optimizer_step: bool) -> float | None:
        """Count a batch; at an optimizer step, the seconds since the step before."""
        self.samples += samples
        if not optimizer_step:
            return None
        now = time.perf_counter()
        seconds, self._last_step = now - self._last_step, now
        self.steps += 1
        self.step_seconds += seconds
        return seconds

    def epoch_started(self) -> None:
        """The next step's time starts now, not at the last step of the epoch before (which
        validation and checkpoints followed)."""
        self._last_step = time.perf_counter()
        self._epochs += 1
        if self._epochs == 2:  # the first epoch warms up (tracing, allocators): kept apart
            self._first_epoch = (self.steps, self.samples, self.step_seconds)

    def throughput(self) -> dict[str, float]:
        """Optimizer steps and samples a second over the training steps alone (validation and
        checkpoints left out), from the second epoch on when there is one."""
        first = self._first_epoch
        base = first if first and self.steps > first[0] else (0, 0, 0.0)
        steps, seconds = self.steps - base[0], self.step_seconds - base[2]
        if steps < 1 or seconds <= 0:
            return {}
        return {
            "train_steps_per_second": round(steps / seconds, 3),
            "train_samples_per_second": round((self.samples - base[1]) / seconds, 1),
        }

    def observe(self, metrics: Mapping[str, Any]) -> None:
        pass

    def checkpoint_saved(self, seconds: float) -> None:
        pass

    def close(self, exit_code: int) -> None:
        pass


class LiveMetrics(NoLiveMetrics):
    """The numbers behind /metrics, kept as plain Python values until a scrape reads them."""

    def __init__(self, run: str, rank: int, checkpoint_interval_s: float | None = None) -> None:
        super().__init__()
        self.rank = rank
        self.labels = {"run": run, "rank": str(rank)}  # on every series
        self.checkpoint_interval_s = checkpoint_interval_s
        self.started = time.time()
        self.step_counts = [0] * (len(STEP_BUCKETS) + 1)  # the last: above every bucket
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.checkpoints = 0
        self.last_checkpoint: float | None = None  # unix time
        self.checkpoint_seconds: float | None = None
        self.training = True
        # (time, samples) about once a second over the last RATE_WINDOW_S: samples/s over that
        # window, which no reader moves (a second scraper, the final push).
        self._marks: collections.deque[tuple[float, int]] = collections.deque(
            [(self._last_step, 0)], maxlen=RATE_WINDOW_S + 1
        )

    # ---- from the training loops ----------------------------------------------------------

    def batch(self, samples: int, optimizer_step: bool) -> float | None:
        seconds = super().batch(samples, optimizer_step)
        if seconds is None:
            return None
        if self._last_step - self._marks[-1][0] >= 1.0:
            self._marks.append((self._last_step, self.samples))
        self.step_counts[bisect.bisect_left(STEP_BUCKETS, seconds)] += 1
        return seconds

    def observe(self, metrics: Mapping[str, Any]) -> None:
        """Logged metrics (`train/loss`, `val/accuracy`, `train/lr`, `epoch`) as gauges."""
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            self.values[gauge_of(key)] = float(value)

    def checkpoint_saved(self, seconds: float) -> None:
        self.checkpoints += 1
        self.last_checkpoint = time.time()
        self.checkpoint_seconds = seconds

    # ---- read by a scrape -----------------------------------------------------------------

    def samples_per_second(self) -> float:
        """Samples trained per second over about the last RATE_WINDOW_S seconds."""
        now = time.perf_counter()
        then, samples = self._marks[0]
        return (self.samples - samples) / (now - then) if now > then else 0.0


def gauge_of(key: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A logged metric's gauge name and labels: `val/loss` -> train_loss{split="val"}."""
    if key == "epoch":
        return "train_epoch", ()
    split, _, name = key.rpartition("/")
    if name in ("lr", "learning_rate"):
        return "train_learning_rate", ()
    if name == "loss":
        return "train_loss", (("split", split or "train"),)
    if name == "accuracy":
        return "train_accuracy_ratio", (("split", split or "train"),)
    return "train_metric", (("split", split), ("name", name))


def families(live: LiveMetrics) -> Iterator[Any]:
    """The exposition of `live`, built at scrape time (prometheus_client's metric families)."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    names, values = list(live.labels), list(live.labels.values())

    def gauge(name: str, text: str, value: float | None, **extra: str) -> Iterator[Any]:
        if value is None:
            return
        family = GaugeMetricFamily(name, text, labels=[*names, *extra])
        family.add_metric([*values, *extra.values()], value)
        yield family

    steps = CounterMetricFamily("train_steps", "Optimizer steps taken.", labels=names)
    steps.add_metric(values, live.steps)
    yield steps
    samples = CounterMetricFamily("train_samples", "Samples trained on.", labels=names)
    samples.add_metric(values, live.samples)
    yield samples
    buckets, total = [], 0
    for bound, count in zip((*map(str, STEP_BUCKETS), "+Inf"), live.step_counts, strict=True):
        total += count
        buckets.append((bound, total))
    step_time = HistogramMetricFamily(
        "train_step_duration_seconds",
        "Wall time from one optimizer step to the next, data loading included.",
        labels=names,
    )
    step_time.add_metric(values, buckets, live.step_seconds)
    yield step_time
    yield from gauge(
        "train_samples_per_second", f"Samples per second over the last {RATE_WINDOW_S} s.",
        live.samples_per_second(),
    )  # fmt: skip
    yield from gauge(
        "train_running", "1 while the run trains, 0 once it ended.", float(live.training)
    )
    yield from gauge("train_start_time_seconds", "When the run started (unix time).", live.started)
    grouped: dict[tuple[str, tuple[str, ...]], Any] = {}
    for (name, pairs), value in sorted(live.values.items()):
        extra = tuple(label for label, _ in pairs)
        family = grouped.get((name, extra))
        if family is None:
            family = grouped[(name, extra)] = GaugeMetricFamily(
                name, HELP.get(name, "A logged metric."), labels=[*names, *extra]
            )
        family.add_metric([*values, *(v for _, v in pairs)], value)
    yield from grouped.values()
    checkpoints = CounterMetricFamily("train_checkpoints", "Checkpoints written.", labels=names)
    checkpoints.add_metric(values, live.checkpoints)
    yield checkpoints
    yield from gauge(
        "train_last_checkpoint_timestamp_seconds", "When the last checkpoint was written.",
        live.last_checkpoint,
    )  # fmt: skip
    yield from gauge(
        "train_checkpoint_duration_seconds", "How long the last checkpoint took to write.",
        live.checkpoint_seconds,
    )  # fmt: skip
    yield from gauge(
        "train_checkpoint_interval_seconds",
        "The least time between two checkpoints (callbacks.checkpoint.min_interval_s).",
        live.checkpoint_interval_s,
    )


HELP = {
    "train_epoch": "Epochs completed.",
    "train_learning_rate": "The learning rate of the last logged step.",
    "train_loss": "The last logged loss of a split.",
    "train_accuracy_ratio": "The last logged accuracy of a split, 0 to 1.",
}
