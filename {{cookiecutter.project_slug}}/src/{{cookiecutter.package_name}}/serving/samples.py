"""Live inputs' predictions sampled to JSON lines, to label later and to see what drift looked
like: `serve --sample-rate R --sample-dir DIR` (or $SAMPLE_RATE, $SAMPLE_DIR).

Each input of a prediction request is kept with probability R, one line per input in
DIR/samples-<UTC hour>.jsonl: the time, an id (the first 16 hex digits of the SHA-256 of the
input's float32 bytes: the same input has the same id, and the input is not in it), the class
and its confidence. The input itself only with --sample-inputs: live data may be personal.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import random
import threading
from pathlib import Path

import numpy as np


class Sampler:
    def __init__(self, folder: Path, rate: float, classes: list[str], inputs: bool = False):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.rate, self.classes, self.inputs = folder, rate, classes, inputs
        self._lock = threading.Lock()
        self._random = random.Random()

    def offer(self, inputs: np.ndarray, probabilities: np.ndarray) -> None:
        """Keep each input of a batch with probability `rate`."""
        kept = [index for index in range(len(inputs)) if self._random.random() < self.rate]
        if not kept:
            return
        now = datetime.datetime.now(datetime.UTC)
        lines = []
        for index in kept:
            row, x = probabilities[index], np.ascontiguousarray(inputs[index], np.float32)
            line = {
                "time": now.isoformat(timespec="milliseconds"),
                "id": hashlib.sha256(x.tobytes()).hexdigest()[:16],
                "class": self.classes[int(row.argmax())],
                "confidence": round(float(row.max()), 6),
            }
            if self.inputs:
                line["input"] = x.tolist()
            lines.append(json.dumps(line))
        path = self.folder / f"samples-{now:%Y%m%dT%H}.jsonl"
        with self._lock, path.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
