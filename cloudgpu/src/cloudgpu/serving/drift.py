"""Drift: how far the last WINDOW inputs and predictions have moved from the validation split's
(the export's reference.npz), as the population stability index.

PSI = sum over bins of (p - q) * ln(p / q), p the window's share of a bin and q the reference's.
Its rule of thumb (an industry convention, not a test): under 0.1 stable, 0.1 to 0.25 a moderate
shift, over 0.25 a significant one. Predictions: over the predicted classes. Inputs: over each
feature's decile bins, averaged over the features. Computed when /metrics is scraped.

One request adds at most PER_REQUEST of its inputs (evenly spaced): a request may hold more
inputs than the window, and no one request should set the gauges alone. The inputs are what
callers sent: a caller who sends many requests still moves them (cloudgpu docs/serving.md:
Security).
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

WINDOW = 1000  # the inputs the statistics are taken over: the newest ones
PER_REQUEST = WINDOW // 10
SMOOTH = 1e-4  # an empty bin's share, so that ln stays finite
# The reference (an export's reference.npz, from its validation split: reference() below).
QUANTILES = np.linspace(0.0, 1.0, 11)  # decile edges of each input feature
MAX_FEATURES = 1024  # features with reference bins; an image has more pixels than drift needs
CONFIDENCE_BINS = np.linspace(0.0, 1.0, 11)


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def feature_bins(x: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
    """Each input's bin (0-9) per feature: how many of the feature's inner decile edges it
    reaches. Tied values (a pixel that is mostly 0) land in one bin, here and when serving."""
    flat = x.reshape(len(x), -1)[:, : len(quantiles)]
    return (flat[:, :, None] >= quantiles[None, :, 1:-1]).sum(axis=2)


def psi(window: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """PSI of shares `window` against `reference` along the last axis."""
    p = np.clip(window, SMOOTH, None)
    q = np.clip(reference, SMOOTH, None)
    return ((p - q) * np.log(p / q)).sum(axis=-1)


def reference(x: np.ndarray, logits: np.ndarray, num_classes: int) -> dict[str, Any]:
    """The validation split's distributions, for drift: per-feature decile edges (the first
    MAX_FEATURES features, flattened) and the share of inputs in each bin they make,
    predicted-class counts, top-confidence histogram."""
    flat = x.reshape(len(x), -1)[:, :MAX_FEATURES].astype(np.float64)
    probabilities = softmax(logits.astype(np.float64))
    quantiles = np.quantile(flat, QUANTILES, axis=0).T  # (features, 11)
    bins = feature_bins(flat, quantiles)
    shares = np.stack([np.bincount(column, minlength=10) for column in bins.T]) / len(flat)
    return {
        "feature_quantiles": quantiles,
        "feature_bin_shares": shares,  # (features, 10)
        "class_counts": np.bincount(probabilities.argmax(1), minlength=num_classes),
        "confidence_edges": CONFIDENCE_BINS,
        "confidence_counts": np.histogram(probabilities.max(1), CONFIDENCE_BINS)[0],
    }


class Drift:
    def __init__(self, reference_file: Path, num_classes: int) -> None:
        with np.load(reference_file) as reference:
            self.quantiles = reference["feature_quantiles"]
            self.bin_shares = reference["feature_bin_shares"]
            counts = reference["class_counts"].astype(np.float64)
        self.class_shares = counts / max(counts.sum(), 1.0)
        self.num_classes = num_classes
        self._bins: deque[np.ndarray] = deque(maxlen=WINDOW)  # per input: its bin per feature
        self._classes: deque[int] = deque(maxlen=WINDOW)
        self._lock = threading.Lock()

    def observe(self, inputs: np.ndarray, predicted: np.ndarray, sizes: list[int]) -> None:
        """A batch's inputs and predicted classes, `sizes` the inputs of each of its requests."""
        if max(sizes) > PER_REQUEST:
            starts = np.cumsum([0, *sizes[:-1]])
            chosen = np.concatenate([
                start + np.linspace(0, size - 1, min(size, PER_REQUEST)).astype(np.int64)
                for start, size in zip(starts, sizes, strict=True)
            ])  # fmt: skip
            inputs, predicted = inputs[chosen], predicted[chosen]
        bins = feature_bins(inputs.astype(np.float64), self.quantiles).astype(np.int8)
        with self._lock:
            self._bins.extend(bins)
            self._classes.extend(int(c) for c in predicted)

    def count(self) -> int:
        return len(self._classes)

    def prediction_psi(self) -> float:
        with self._lock:
            classes = np.fromiter(self._classes, dtype=np.int64)
        if not len(classes):
            return 0.0
        shares = np.bincount(classes, minlength=self.num_classes) / len(classes)
        return float(psi(shares, self.class_shares))

    def input_psi(self) -> float:
        with self._lock:
            if not self._bins:
                return 0.0
            bins = np.stack(self._bins)
        shares = (bins[:, :, None] == np.arange(10)[None, None, :]).mean(axis=0)
        return float(psi(shares, self.bin_shares).mean())
