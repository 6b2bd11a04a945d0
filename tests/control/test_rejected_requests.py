"""Malformed HTTP from a peer: one short log line per request, never its bytes, and only so many
lines a second, the rest counted; the peer cannot flood the journal."""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.http_exceptions import BadHttpMethod

from recalld.config import ServerConfig
from recalld.log import rejected_requests_logged
from tests.support import Daemon
from tests.support.waits import eventually

LINE_BYTES = 1000
"""A generous bound on one log line about a rejected request (they are about 250 bytes)."""


def new_log_lines(daemon: Daemon, offset: int) -> list[dict[str, Any]]:
    text = daemon.log_path.read_bytes()[offset:].decode(errors="replace")
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def send_raw(daemon: Daemon, data: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(daemon.socket))
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_burst_of_malformed_requests_logs_a_bounded_trickle_without_their_bytes(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon()
    marker = "MARKER" + uuid.uuid4().hex
    padding = (marker * 64).encode()  # about 4 KB a request, as in the report
    garbage = [
        # not a method at all: aiohttp treats this as noise on the first request of a connection
        marker.encode() + b"\x01 / HTTP/1.1\r\nX-Pad: " + padding + b"\r\n\r\n",
        # a well-formed start, then a header value with a control character in it
        b"GET /livez HTTP/1.1\r\nHost: recalld\r\nX-" + marker.encode() + b": \x01" + padding + b"\r\n\r\n",
    ]
    burst = 500
    offset = daemon.log_path.stat().st_size
    started = time.monotonic()
    answers = [send_raw(daemon, garbage[i % len(garbage)]) for i in range(burst)]
    elapsed = time.monotonic() - started
    assert all(answer.split(b" ", 2)[1] == b"400" for answer in answers)

    per_second = ServerConfig().rejected_log_per_s
    # every 1 s window the burst touched may carry its quota of lines and one count of the rest
    most_lines = (int(elapsed) + 2) * (per_second + 1)
    grown = daemon.log_path.stat().st_size - offset
    assert grown <= most_lines * LINE_BYTES, f"{grown} bytes of log for {burst} bad requests in {elapsed:.1f} s"
    assert marker not in daemon.log_path.read_text(errors="replace"), "request bytes reached the log"

    # every rejection is either a line of its own or counted in a later line
    def accounted() -> tuple[list[dict[str, Any]], int]:
        lines = new_log_lines(daemon, offset)
        rejected = [x for x in lines if x.get("event") == "request_rejected"]
        return rejected, sum(x["suppressed"] for x in lines if x.get("event") == "request_rejections_suppressed")

    rejected, suppressed = eventually(
        accounted, 30, f"all {burst} rejections logged or counted", accept=lambda seen: len(seen[0]) + seen[1] >= burst
    )
    assert len(rejected) + suppressed == burst
    assert 1 <= len(rejected) <= most_lines
    assert {x["error"] for x in rejected} == {"BadHttpMethod", "BadHttpMessage"}, "it says what was wrong"
    assert all(x["level"] == "warning" and x["status"] == 400 and "exception" not in x for x in rejected)
    assert all("malformed" in x["msg"] for x in rejected)
    assert daemon.call("GET", "/livez")[0] == 200


def test_at_info_level_non_http_traffic_is_still_one_line_and_aiohttp_debug_stays_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp reports a first request that is no HTTP at all at DEBUG only: under the daemon's
    usual level it would vanish, unlike every other rejection."""
    caplog.set_level(logging.INFO)
    later: list[tuple[float, Callable[[], None]]] = []
    server_log = logging.getLogger("aiohttp.server")
    with rejected_requests_logged(2, lambda delay, report: later.append((delay, report))):
        for _ in range(5):
            try:
                raise BadHttpMethod("MARKER")
            except BadHttpMethod as exc:
                server_log.debug("Error handling request from %s", "", exc_info=exc)
        server_log.debug("Ignored premature client disconnection")
        assert len(later) == 1 and 0 < later[0][0] <= 1.0, "the count is reported once the second is over"
        later[0][1]()
    assert [r.getMessage() for r in caplog.records] == [
        "rejected a malformed request: 400 BadHttpMethod (its bytes are not logged)",
        "rejected a malformed request: 400 BadHttpMethod (its bytes are not logged)",
        "3 more malformed requests were rejected but not logged (at most 2 lines a second)",
    ]
    assert "MARKER" not in caplog.text
    assert server_log.level == logging.NOTSET and not server_log.filters
