"""The server's Prometheus metrics, on its own registry (served at /metrics).

Requests, errors and latency by route and status code (RED), the batches the model ran, the
predicted classes (only for up to MAX_CLASS_LABELS classes: a label per class must stay few),
the top confidence of each prediction, and drift against the export's reference (drift.py).
Names follow Prometheus's conventions: a unit suffix, `_total` on counters.
"""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .drift import Drift

MAX_CLASS_LABELS = 100
# 0.5 ms to 10 s: the server's own overhead up to a slow model on a large batch.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
CONFIDENCE_BUCKETS = tuple(round(0.1 * step, 1) for step in range(1, 11))


class ServingMetrics:
    def __init__(self, classes: list[str]) -> None:
        self.registry = CollectorRegistry()
        self.classes = classes
        self.requests = Counter(
            "inference_requests", "Requests answered, by route and status code",
            ["route", "code"], registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "inference_request_duration_seconds", "Time from request to answer, by route",
            ["route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.in_flight = Gauge(
            "inference_in_flight", "Requests being answered now", registry=self.registry
        )
        self.batch_size = Histogram(
            "inference_batch_size", "Inputs per run of the model (dynamic batching)",
            buckets=BATCH_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.predicted = Counter(
            "inference_predicted_class", "Predictions, by class", ["cls"], registry=self.registry
        )
        self.confidence = Histogram(
            "inference_top_confidence", "The predicted class's probability",
            buckets=CONFIDENCE_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.samples_dropped = Counter(
            "inference_samples_dropped", "Sampled inputs not written: the queue was full or a "
            "write failed (serving/samples.py)", registry=self.registry,
        )  # fmt: skip
        self.ready = Gauge("inference_ready", "1 once the model answers", registry=self.registry)

    def watch_drift(self, drift: Drift) -> None:
        """Gauges computed from `drift` at each scrape."""
        for name, text, value in (
            ("inference_prediction_psi", "PSI of the predicted classes against validation's",
             drift.prediction_psi),
            ("inference_input_psi", "PSI of the inputs' decile bins against validation's, "
             "averaged over features", drift.input_psi),
            ("inference_drift_window_inputs", "Inputs the PSI gauges are taken over",
             drift.count),
        ):  # fmt: skip
            Gauge(name, text, registry=self.registry).set_function(value)

    def observe_predictions(self, probabilities: np.ndarray) -> None:
        chosen = probabilities.argmax(1)
        for confidence in probabilities.max(1):
            self.confidence.observe(float(confidence))
        if len(self.classes) <= MAX_CLASS_LABELS:
            for index, count in zip(*np.unique(chosen, return_counts=True), strict=True):
                self.predicted.labels(cls=self.classes[int(index)]).inc(int(count))
