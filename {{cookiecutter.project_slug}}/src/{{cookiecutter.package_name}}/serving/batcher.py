"""Dynamic batching: requests that arrive together run through the model as one batch.

A batch takes what is queued and waits, at most `max_delay` seconds, only for requests the
server is already answering (`pending()`: they are on their way): a request alone runs at once,
and concurrent ones share a run. A batch holds at most `max_batch` inputs; one thread runs the
model, so a framework's own thread pool is never shared between requests.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np


class Batcher:
    def __init__(
        self,
        predict: Callable[[np.ndarray], np.ndarray],
        max_batch: int = 64,
        max_delay: float = 0.002,
        on_batch: Callable[[int], None] | None = None,
        pending: Callable[[], int] = lambda: 0,
    ) -> None:
        self.predict, self.max_batch, self.max_delay = predict, max_batch, max_delay
        self.on_batch, self.pending = on_batch, pending
        self._queue: queue.Queue[tuple[np.ndarray, Future[np.ndarray]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="batcher", daemon=True)
        self._thread.start()

    def submit(self, inputs: np.ndarray) -> Future[np.ndarray]:
        """The logits of `inputs` (a batch of its own), once the model has run them."""
        future: Future[np.ndarray] = Future()
        self._queue.put((inputs, future))
        return future

    def close(self) -> None:
        """Run what is queued, then stop."""
        self._queue.put(None)
        self._thread.join()

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            waiting, rows = [first], len(first[0])
            deadline = time.monotonic() + self.max_delay
            stop = False
            while rows < self.max_batch:
                left = deadline - time.monotonic()
                expected = len(waiting) < self.pending()  # more requests are on their way
                try:
                    if expected and left > 0:
                        item = self._queue.get(timeout=left)
                    else:
                        item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stop = True
                    break
                waiting.append(item)
                rows += len(item[0])
            self._run_batch(waiting, rows)
            if stop:
                return

    def _run_batch(self, waiting: list[tuple[np.ndarray, Future[np.ndarray]]], rows: int) -> None:
        try:
            logits = self.predict(np.concatenate([inputs for inputs, _ in waiting]))
        except Exception as error:  # the requests get a 500 each, the server goes on
            for _, future in waiting:
                future.set_exception(error)
            return
        if self.on_batch is not None:
            self.on_batch(rows)
        start = 0
        for inputs, future in waiting:
            future.set_result(logits[start : start + len(inputs)])
            start += len(inputs)
