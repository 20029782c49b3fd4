"""uvicorn's HTTP protocol (httptools), with what it leaves unbounded bounded: a request's line
and headers must arrive within HEAD_WITHIN seconds (of the connection's opening, or of the
first byte after the last answer) and take at most MAX_HEAD bytes. uvicorn itself starts no
timer before a connection's first answer and reads headers of any size, so slow or endless
headers held connections (and memory) for as long as a client liked. The body's deadline is
http.py's; an idle connection between requests is closed after server.py's KEEP_ALIVE.
"""

from __future__ import annotations

import asyncio
from asyncio import TimerHandle

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEAD_WITHIN = 10.0  # seconds: a client or load balancer sends its headers at once
MAX_HEAD = 64 * 1024  # bytes of request line and headers (nginx's default allows 32 KiB)


class GuardedHttpTools(HttpToolsProtocol):
    _head_timer: TimerHandle | None = None
    _head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head_done()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head_timer is None and (self.cycle is None or self.cycle.response_complete):
            self._await_head()  # the first bytes of the next request on a kept connection
        self._head_bytes += len(data)
        super().data_received(data)
        if self._head_timer is not None and self._head_bytes > MAX_HEAD:
            self._refuse(b"431 Request Header Fields Too Large")

    def on_headers_complete(self) -> None:
        self._head_done()
        super().on_headers_complete()

    def _await_head(self) -> None:
        self._head_bytes = 0
        self._head_timer = self.loop.call_later(HEAD_WITHIN, self._refuse, b"408 Request Timeout")

    def _head_done(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, status: bytes) -> None:
        """Answer `status` and close: no request of this connection is being answered."""
        self._head_done()
        if not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 %s\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                                 % status)  # fmt: skip
            self.transport.close()
