"""Dynamic batching: requests that arrive together run through the model as one batch.

Requests are queued on the server's event loop. A batch takes every request queued by the time
the loop comes round to it, and waits, at most `max_delay` seconds, only while the server has
requests on their way here (`pending()`: being read, not yet submitted): a request alone runs at
once, and concurrent ones share a run. A batch holds at most `max_batch` inputs. One thread runs
the model, so the loop reads and answers other requests meanwhile, and a framework's own thread
pool is never shared between requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np


class Batcher:
    def __init__(
        self,
        predict: Callable[[np.ndarray, list[int]], np.ndarray],
        max_batch: int = 64,
        max_delay: float = 0.002,
        pending: Callable[[], int] = lambda: 0,
    ) -> None:
        """`predict`: a row per input of a batch (its logits, say), given the batch and how many
        inputs each of its requests holds, called on the model's thread; it may also record
        the batch (metrics, drift, samples)."""
        self.predict, self.max_batch, self.max_delay, self.pending = (
            predict, max_batch, max_delay, pending
        )  # fmt: skip
        self._queue: list[tuple[np.ndarray, asyncio.Future[np.ndarray]]] = []
        self._arrived: asyncio.Event | None = None  # made on the loop, by the first submit
        self._task: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference
        self._model = ThreadPoolExecutor(1, thread_name_prefix="model")

    def submit(self, inputs: np.ndarray) -> asyncio.Future[np.ndarray]:
        """The rows `predict` gives for `inputs` (a batch of its own), once the model has run
        them; called on the event loop."""
        loop = asyncio.get_running_loop()
        if self._arrived is None:
            self._arrived = asyncio.Event()
            self._task = loop.create_task(self._run(self._arrived), name="batcher")
        future: asyncio.Future[np.ndarray] = loop.create_future()
        self._queue.append((inputs, future))
        self._arrived.set()
        return future

    def close(self) -> None:
        """Let the batch on the model's thread finish, then stop it."""
        self._model.shutdown(wait=True)

    async def _run(self, arrived: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await arrived.wait()
            await asyncio.sleep(0)  # requests read in this turn of the loop join the batch
            deadline = loop.time() + self.max_delay
            while self._rows() < self.max_batch and self.pending() > 0:
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), deadline - loop.time())
                except TimeoutError:
                    break
            batch: list[tuple[np.ndarray, asyncio.Future[np.ndarray]]] = []
            rows = 0
            while self._queue and (not batch or rows + len(self._queue[0][0]) <= self.max_batch):
                inputs, future = self._queue.pop(0)
                if not future.done():  # not given up on (its request timed out)
                    batch.append((inputs, future))
                    rows += len(inputs)
            if self._queue:  # more than a batch holds: the next batch takes them at once
                arrived.set()
            else:
                arrived.clear()
            if batch:
                await self._run_batch(loop, batch)

    def _rows(self) -> int:
        return sum(len(inputs) for inputs, _ in self._queue)

    async def _run_batch(
        self,
        loop: asyncio.AbstractEventLoop,
        batch: list[tuple[np.ndarray, asyncio.Future[np.ndarray]]],
    ) -> None:
        try:
            stacked = np.concatenate([inputs for inputs, _ in batch])
            sizes = [len(inputs) for inputs, _ in batch]
            logits = await loop.run_in_executor(self._model, self.predict, stacked, sizes)
        except Exception as error:  # the requests get a 500 each, the server goes on
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            return
        start = 0
        for inputs, future in batch:
            if not future.done():
                future.set_result(logits[start : start + len(inputs)])
            start += len(inputs)
