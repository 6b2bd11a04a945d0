"""Bursts of connections: the listen backlog holds them while the daemon is busy, and a client
whose connection the kernel still refuses (EAGAIN on a full Unix socket queue) tries again."""

from __future__ import annotations

import errno
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from recalld.client import Client
from tests.support import Daemon

SOMAXCONN = Path("/proc/sys/net/core/somaxconn")


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_burst_of_connections_waits_in_the_backlog_while_the_daemon_is_busy(make_daemon: Any) -> None:
    """400 clients connect while the daemon accepts nothing (stopped, as a loop busy for a moment
    would be): each must wait in the queue, not fail with EAGAIN, and then be served."""
    burst = 400
    if int(SOMAXCONN.read_text()) < burst:
        pytest.skip(f"net.core.somaxconn is under {burst}: the kernel caps every backlog below the burst")
    daemon: Daemon = make_daemon()
    assert daemon.proc is not None
    waiting: list[socket.socket] = []
    refused = 0
    daemon.proc.send_signal(signal.SIGSTOP)
    try:
        for _ in range(burst):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)  # a full queue answers at once instead of blocking
            try:
                sock.connect(str(daemon.socket))
            except BlockingIOError:
                refused += 1
                sock.close()
            else:
                waiting.append(sock)
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    try:
        assert refused == 0, f"{refused} of {burst} connections refused with EAGAIN"
        for sock in waiting:
            sock.setblocking(True)
            sock.settimeout(60)
            sock.sendall(b"GET /livez HTTP/1.1\r\nHost: recalld\r\nConnection: close\r\n\r\n")
        answers = [read_response(sock) for sock in waiting]
    finally:
        for sock in waiting:
            sock.close()
    assert all(answer.startswith(b"HTTP/1.1 200") for answer in answers)


def test_a_backlog_over_the_kernels_limit_is_clipped_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    from recalld.control.server import listen_backlog

    limit = int(SOMAXCONN.read_text())
    with caplog.at_level(logging.INFO, logger="recalld.control"):
        assert listen_backlog(limit) == limit
        assert not caplog.records
        assert listen_backlog(limit + 1) == limit
    assert "net.core.somaxconn" in caplog.text and str(limit + 1) in caplog.text


class Attempts(logging.Handler):
    """Counts the client's connection retries and wakes whoever waits for the first one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0
        self.first = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.count += 1
            self.first.set()


@pytest.fixture
def attempts() -> Iterator[Attempts]:
    logger = logging.getLogger("recalld.client")
    handler, level = Attempts(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def full_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, Path]]:
    """A real listening Unix socket whose queue (backlog 0: one connection) is already full."""
    path = tmp_path / "busy.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(0)
    queued = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    queued.setblocking(False)
    queued.connect(str(path))
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    with pytest.raises(BlockingIOError) as full:
        probe.connect(str(path))
    assert full.value.errno == errno.EAGAIN
    probe.close()
    yield server, path
    queued.close()
    server.close()


def test_the_client_tries_again_when_the_backlog_is_full_for_a_moment(
    full_socket: tuple[socket.socket, Path], attempts: Attempts
) -> None:
    server, path = full_socket
    served: list[bytes] = []

    def accept_once_refused() -> None:
        # the moment passes only after the client has been refused at least once
        if not attempts.first.wait(30):
            return
        early, _ = server.accept()  # the connection that filled the queue
        early.close()
        server.settimeout(30)
        conn, _ = server.accept()
        with conn:
            served.append(conn.recv(65536))
            body = b'{"status": "ok"}'
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )

    acceptor = threading.Thread(target=accept_once_refused)
    acceptor.start()
    client = Client(path, timeout=30)
    try:
        assert client.request("GET", "/livez") == {"status": "ok"}
    finally:
        client.close()
        attempts.first.set()
        acceptor.join()
    assert attempts.count >= 1
    assert served and served[0].startswith(b"GET /livez")


def test_the_client_gives_up_after_a_few_tries_on_a_backlog_that_stays_full(
    full_socket: tuple[socket.socket, Path], attempts: Attempts
) -> None:
    _, path = full_socket
    client = Client(path, timeout=30)
    try:
        with pytest.raises(ConnectionError, match="not reachable") as refused:
            client.request("GET", "/livez")
    finally:
        client.close()
    assert 2 <= attempts.count <= 10, "a few tries, bounded"
    assert "Resource temporarily unavailable" in str(refused.value) or "EAGAIN" in str(refused.value)
