"""Turn SIGTERM and SIGINT into a polite request to stop after the current step.

Spot preemption, `docker stop` and Ctrl-C all arrive as one of these signals. The training loop
checks `requested` after each step, saves a checkpoint and exits with 128 + the signal number, as a
shell would. A second signal restores the default behaviour, so pressing Ctrl-C twice still kills.
"""

from __future__ import annotations

import logging
import signal
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

HANDLED = (signal.SIGTERM, signal.SIGINT)


class StopRequested(Exception):
    """Raised by the loop once it has saved a checkpoint after a stop signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"stopped by {signal.Signals(signum).name}; checkpoint saved")


class GracefulStop:
    """Context manager that records the first stop signal instead of dying on it."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}  # the handlers before ours

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        log.warning("%s received: stopping after this step", signal.Signals(signum).name)
        self.signum = signum
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def __enter__(self) -> GracefulStop:
        for sig in HANDLED:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
