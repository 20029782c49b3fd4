"""This machine's loopback, for invoke estimate's profile: how long two endpoints take to swap
a run's gradients (the bytes a ring all-reduce of two moves each way), and a free port for two
data-parallel processes to meet on."""

from __future__ import annotations

import socket
import statistics
import threading
import time


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def swap_seconds(nbytes: int, rounds: int = 15) -> float:
    """The median time two endpoints on this machine take to swap `nbytes` both ways over TCP:
    a ring all-reduce of two nodes moves that much each way."""
    payload = bytes(max(1, nbytes))
    with socket.create_server(("127.0.0.1", 0)) as server:
        one = socket.create_connection(server.getsockname())
        other, _ = server.accept()
    times = []
    with one, other:
        for _ in range(rounds + 2):
            started = time.perf_counter()
            senders = [threading.Thread(target=s.sendall, args=(payload,)) for s in (one, other)]
            for sender in senders:
                sender.start()
            for end in (one, other):
                _receive(end, len(payload))
            for sender in senders:
                sender.join()
            times.append(time.perf_counter() - started)
    return statistics.median(times[2:])


def _receive(end: socket.socket, size: int) -> None:
    view = memoryview(bytearray(size))
    while size:
        got = end.recv_into(view[-size:], size)
        if not got:
            raise OSError("the all-reduce peer closed")
        size -= got
