"""live.py's numbers served at http://<host>:<port + local rank>/metrics (prometheus_client,
imported only here, for monitoring=prometheus), announced to `invoke monitor`, and pushed once to
a Pushgateway when the run ends, so that finished runs stay visible."""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .live import LiveMetrics, MonitoringError, NoLiveMetrics, families

log = logging.getLogger(__name__)


class _Collector:
    """prometheus_client's side of LiveMetrics."""

    def __init__(self, live: LiveMetrics) -> None:
        self.live = live

    def collect(self) -> Iterator[Any]:
        yield from families(self.live)

    def describe(self) -> list:
        return []  # don't collect at registration


class Exporter(LiveMetrics):
    """LiveMetrics served over HTTP, announced to `invoke monitor`, pushed when it ends."""

    def __init__(
        self,
        settings: Any,
        run_dir: Path,
        rank: int,
        local_rank: int,
        job: str,
        checkpoint_interval_s: float | None = None,
    ) -> None:
        from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server

        from . import gpu_metrics

        super().__init__(run_dir.name, rank, checkpoint_interval_s)
        self.settings, self.job = settings, job
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))
        ProcessCollector(registry=self.registry)  # this process's CPU seconds and memory
        if local_rank == 0:  # one process per machine reports its GPUs
            gpu_metrics.register(self.registry, self.labels)
        self.port = settings.port + local_rank
        try:
            self._server, _ = start_http_server(self.port, settings.host, self.registry)
        except OSError as error:
            raise MonitoringError(
                f"monitoring.port={settings.port}: cannot serve on {settings.host}:{self.port} "
                f"({error.strerror}); pick another port with monitoring.port=N"
            ) from None
        self._target = self._announce()
        log.info("live metrics: http://%s:%d/metrics", settings.host, self.port)

    def _announce(self) -> Path | None:
        """A file_sd target file, which the Prometheus of `invoke monitor` picks up."""
        if not self.settings.targets_dir:
            return None
        folder = Path(self.settings.targets_dir)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{self.labels['run']}-rank{self.rank}-{os.getpid()}.json"
        host = "127.0.0.1" if self.settings.host in ("0.0.0.0", "") else self.settings.host
        entry = [{"targets": [f"{host}:{self.port}"], "labels": {}}]
        target.write_text(json.dumps(entry), encoding="utf-8")
        return target

    def close(self, exit_code: int) -> None:
        """The last numbers to the Pushgateway (rank 0), then stop serving."""
        self.training = False
        if self.settings.pushgateway and self.rank == 0:
            self._push(exit_code)
        self._server.shutdown()
        self._server.server_close()
        if self._target is not None:
            self._target.unlink(missing_ok=True)

    def _push(self, exit_code: int) -> None:
        """`pushadd`: a failed run replaces the metrics it pushes but leaves the timestamp of an
        earlier success of the same run (a resumed one) in place."""
        from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

        final = CollectorRegistry()
        final.register(_Collector(self))
        Gauge("train_duration_seconds", "How long the run took.", registry=final).set(
            time.time() - self.started
        )
        Gauge("train_exit_code", "0: finished; else the signal or error.", registry=final).set(
            exit_code
        )
        if exit_code == 0:
            Gauge(
                "train_last_success_timestamp_seconds", "When the run last finished.",
                registry=final,
            ).set_to_current_time()  # fmt: skip
        grouping = {"run": self.labels["run"], "instance": socket.gethostname()}
        try:
            pushadd_to_gateway(
                self.settings.pushgateway, job=self.job, registry=final,
                grouping_key=grouping, timeout=10,
            )  # fmt: skip
        except OSError as error:  # the run is done: a gateway that is down costs a warning
            log.warning("monitoring.pushgateway=%s: push failed: %s", self.settings.pushgateway,
                        error)  # fmt: skip


def start(
    settings: Any,
    run_dir: Path,
    rank: int,
    local_rank: int,
    job: str,
    checkpoint_interval_s: float | None = None,
) -> NoLiveMetrics:
    """The run's live metrics: an Exporter for monitoring=prometheus, else NoLiveMetrics."""
    if not settings.enabled:
        return NoLiveMetrics()
    return Exporter(settings, run_dir, rank, local_rank, job, checkpoint_interval_s)
