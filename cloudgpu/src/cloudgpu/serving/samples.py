"""Live inputs' predictions sampled to JSON lines, to label later and to see what drift looked
like: `serve --sample-rate R [--sample-uri URI]` (or $SAMPLE_RATE, $SAMPLE_URI).

Each input of a prediction request is kept with probability R, one line per input in
DIR/samples-<UTC hour>.jsonl: the time, an id (the first 16 hex digits of the SHA-256 of the
input's float32 bytes: the same input has the same id, and the input is not in it), the class
and its confidence. The input itself only with --sample-inputs: live data may be personal.

With a URI (buckets.py: gs://, an Azure blob URL or a folder), every hour's file is copied
there each --sample-every seconds while it grows and once more at the end; an hour that is
over leaves the container's disk once its copy is made. A copy that fails is logged and tried
again the next time: the samples wait on the disk, the answers do not.

The model's thread only chooses the inputs kept and queues them (at most QUEUED batches); a
thread of its own writes them. Where the queue is full or a write fails (a full disk), those
samples are dropped and counted (inference_samples_dropped_total): predictions never wait on
samples, and a failing sampler fails none. Sampled inputs are whatever callers sent: untrusted
data to whoever reads them (cloudgpu docs/serving.md: Security).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import queue
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import buckets

log = logging.getLogger(__name__)
LAST_COPY_TIMEOUT_S = 10.0  # at SIGTERM: SageMaker kills 30 s after it, and draining comes first
QUEUED = 256  # batches of samples waiting to be written


@dataclass(frozen=True)
class Sampling:
    folder: Path  # where the hours' files are written
    rate: float  # the share of inputs kept
    inputs: bool = False  # the inputs too
    uri: str = ""  # where the files are copied (buckets.put); nowhere when empty
    every_s: float = 300.0


class Sampler:
    def __init__(self, sampling: Sampling, classes: list[str],
                 dropped: Callable[[int], None] = lambda count: None) -> None:  # fmt: skip
        """`dropped(count)`: told of each sample not written."""
        sampling.folder.mkdir(parents=True, exist_ok=True)
        self.sampling, self.classes, self.dropped = sampling, classes, dropped
        self._queue: queue.Queue[tuple[datetime.datetime, np.ndarray, np.ndarray] | None] = (
            queue.Queue(QUEUED)
        )
        self._failing = False  # the last write failed: said once in the log, not per batch
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._random = random.Random()
        self._copied: dict[str, int] = {}  # file name: its size when last copied
        self._copying = threading.Lock()  # one copy at a time: the timer's or the last
        self._stop = threading.Event()
        self._copier: threading.Thread | None = None
        if sampling.uri:
            self._copier = threading.Thread(target=self._copy_often, daemon=True)
            self._copier.start()
        self._writer = threading.Thread(target=self._write_queued, daemon=True, name="samples")
        self._writer.start()

    def offer(self, inputs: np.ndarray, probabilities: np.ndarray) -> None:
        """Keep each input of a batch with probability `rate`: queued for the writer, or
        dropped (and counted) where the queue is full."""
        rate = self.sampling.rate
        kept = [index for index in range(len(inputs)) if self._random.random() < rate]
        if not kept:
            return
        now = datetime.datetime.now(datetime.UTC)
        try:
            self._queue.put_nowait((now, inputs[kept], probabilities[kept]))
        except queue.Full:
            self.dropped(len(kept))

    def _write_queued(self) -> None:
        while (batch := self._queue.get()) is not None:
            try:
                self._write(*batch)
            except Exception as error:  # a full disk, say: these samples are lost, no answer
                self.dropped(len(batch[1]))
                if not self._failing:
                    log.warning("samples: not written (dropped until a write works): %s", error)
                self._failing = True
            else:
                self._failing = False

    def _write(self, now: datetime.datetime, inputs: np.ndarray, probabilities: np.ndarray) -> None:
        lines = []
        for row, one in zip(probabilities, inputs, strict=True):
            x = np.ascontiguousarray(one, np.float32)
            line = {
                "time": now.isoformat(timespec="milliseconds"),
                "id": hashlib.sha256(x.tobytes()).hexdigest()[:16],
                "class": self.classes[int(row.argmax())],
                "confidence": round(float(row.max()), 6),
            }
            if self.sampling.inputs:
                line["input"] = x.tolist()
            lines.append(json.dumps(line, allow_nan=False))
        path = self.sampling.folder / _hour_file(now)
        with self._lock, path.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")

    def copy(self, last: bool = False) -> None:
        """Copy every hour's file that grew since its last copy; remove each finished hour's
        (every one, when `last`) once its whole content is there."""
        timeout = LAST_COPY_TIMEOUT_S if last else buckets.TIMEOUT_S
        if not self._copying.acquire(timeout=timeout):
            log.warning("samples: the copy before is still going; left on the disk")
            return
        try:
            self._copy(last, timeout)
        finally:
            self._copying.release()

    def _copy(self, last: bool, timeout: float) -> None:
        current = _hour_file(datetime.datetime.now(datetime.UTC))
        for path in sorted(self.sampling.folder.glob("samples-*.jsonl")):
            with self._lock:
                data = path.read_bytes()
            if self._copied.get(path.name) != len(data):
                try:
                    buckets.put(self.sampling.uri, path.name, data, timeout)
                except (OSError, ValueError, KeyError) as error:  # no bucket; a bad token answer
                    log.warning("samples: %s not copied to %s (tried again later): %s",
                                path.name, self.sampling.uri, error)  # fmt: skip
                    continue
                self._copied[path.name] = len(data)
            if last or path.name != current:
                with self._lock:
                    if path.stat().st_size == self._copied[path.name]:
                        path.unlink()

    def close(self) -> None:
        """Write what is queued, then the last copy (the server is stopping); once."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._queue.put(None)
        self._writer.join(LAST_COPY_TIMEOUT_S)
        if self._copier is not None:
            self._stop.set()
            self.copy(last=True)

    def _copy_often(self) -> None:
        while not self._stop.wait(self.sampling.every_s):
            self.copy()


def _hour_file(now: datetime.datetime) -> str:
    return f"samples-{now:%Y%m%dT%H}.jsonl"
