"""Malformed requests: each answered 4xx with a stable error code, and nothing written."""

from __future__ import annotations

import json
import socket
import time
from hashlib import sha256
from typing import Any

import pytest

from tests.support import Daemon, sql
from tests.support.snapshot import settled_snapshot, store_snapshot

NS = "bad-input"
GOOD = {"namespace": NS, "kind": "doc", "title": "A title", "body": "A body"}


def nested(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def with_(**changes: object) -> bytes:
    body = {**GOOD, **changes}
    return json.dumps({k: v for k, v in body.items() if v is not ...}).encode()


# (method, path, raw body, expected status, expected code)
CASES: list[tuple[str, str, bytes | None, int, str]] = [
    ("POST", "/v1/records", b"", 400, "invalid_json"),
    ("POST", "/v1/records", b"{", 400, "invalid_json"),
    ("POST", "/v1/records", b"\xff\xfe\x00garbage", 400, "invalid_json"),
    ("POST", "/v1/records", b"null", 400, "invalid_request"),
    ("POST", "/v1/records", b"[]", 400, "invalid_request"),
    ("POST", "/v1/records", b"42", 400, "invalid_request"),
    ("POST", "/v1/records", b'"x"', 400, "invalid_request"),
    ("POST", "/v1/records", b"{}", 400, "invalid_request"),
    ("POST", "/v1/records", with_(namespace=5), 400, "invalid_request"),
    ("POST", "/v1/records", with_(title=None), 400, "invalid_request"),
    ("POST", "/v1/records", with_(title=...), 400, "invalid_request"),
    ("POST", "/v1/records", with_(body=7), 400, "invalid_request"),
    ("POST", "/v1/records", with_(attributes=[]), 400, "invalid_request"),
    ("POST", "/v1/records", with_(attributes="x"), 400, "invalid_request"),
    ("POST", "/v1/records", with_(id="not-a-uuid"), 400, "invalid_request"),
    ("POST", "/v1/records", with_(tittle="typo"), 400, "invalid_request"),
    ("POST", "/v1/records", with_(source_path=12), 400, "invalid_request"),
    ("POST", "/v1/records", with_(namespace=""), 400, "invalid_value"),
    ("POST", "/v1/records", with_(namespace="   "), 400, "invalid_value"),
    ("POST", "/v1/records", with_(kind=""), 400, "invalid_value"),
    ("POST", "/v1/records", with_(title=""), 400, "invalid_value"),
    ("POST", "/v1/records", with_(title="x" * 200_000), 400, "invalid_value"),
    ("POST", "/v1/records", with_(namespace="n" * 500), 400, "invalid_value"),
    ("POST", "/v1/records", with_(title="t\u0000"), 400, "invalid_value"),
    ("POST", "/v1/records", with_(body="b\u0000"), 400, "invalid_value"),
    ("POST", "/v1/records", with_(attributes={"k": "v\u0000"}), 400, "invalid_value"),
    ("POST", "/v1/records", with_(attributes={"k\u0000": 1}), 400, "invalid_value"),
    (
        "POST",
        "/v1/records",
        b'{"namespace": "bad-input", "body": "' + b"x" * (9 * 1024 * 1024) + b'"}',
        413,
        "payload_too_large",
    ),
    # within the size limits, but more distinct words than PostgreSQL's full-text index holds
    ("POST", "/v1/records", with_(body=" ".join(f"w{i:x}q" for i in range(150_000))), 413, "not_indexable"),
    # a path PostgreSQL's index cannot hold (2,704 bytes), in characters or in UTF-8 bytes
    (
        "POST",
        "/v1/records",
        with_(source_path="/" + "/".join(sha256(b"%d" % i).hexdigest() for i in range(60))),
        400,
        "invalid_value",
    ),
    (
        "POST",
        "/v1/records",
        with_(source_path="/" + "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(1000))),
        400,
        "invalid_value",
    ),
    # a title no index entry holds (3,000 bytes in UTF-8, under max_title_chars)
    ("POST", "/v1/records", with_(title="\u4e2d" * 1000), 400, "invalid_value"),
    # JSON nested deeper than msgspec decodes, and deeper than the store's JSON encoders go
    ("POST", "/v1/records", b'{"attributes": {"a": ' + b"[" * 990 + b"]" * 990 + b"}}", 400, "invalid_json"),
    ("POST", "/v1/records", with_(attributes={"a": nested(100)}), 400, "invalid_value"),
    (
        "POST",
        "/v1/recall",
        b'{"namespace": "n", "query": "q", "attributes": {"a": ' + b"[" * 975 + b"]" * 975 + b"}}",
        400,
        "invalid_value",
    ),
    ("PUT", "/v1/records/not-a-uuid", with_(), 400, "invalid_id"),
    ("PUT", "/v1/records/00000000-0000-0000-0000-000000000000", with_(), 404, "not_found"),
    ("DELETE", "/v1/records/nope", None, 400, "invalid_id"),
    ("PATCH", "/v1/records", with_(), 405, "method_not_allowed"),
    ("GET", "/v1/nowhere", None, 404, "unknown_route"),
    ("GET", "/v1/records", None, 400, "invalid_value"),
    ("GET", "/v1/records?namespace=bad-input&limit=0", None, 400, "invalid_value"),
    ("GET", "/v1/records?namespace=bad-input&after=zzz", None, 400, "invalid_value"),
    # query parameters are checked as the same fields of a body are
    ("GET", "/v1/records?namespace=%00", None, 400, "invalid_value"),
    ("GET", "/v1/records?namespace=bad-input&source_path=%00", None, 400, "invalid_value"),
    ("GET", "/v1/stats?namespace=%00", None, 400, "invalid_value"),
    ("GET", "/v1/usage?namespace=%00", None, 400, "invalid_value"),
    ("GET", "/v1/usage?since=0001-01-01T00:00:00%2B14:00", None, 400, "invalid_value"),
    ("GET", "/v1/usage?since=9999-12-31T23:59:59-14:00", None, 400, "invalid_value"),
    ("POST", "/admin/generations/%00/activate", None, 404, "not_found"),
    ("POST", "/v1/recall", b"{}", 400, "invalid_request"),
    ("POST", "/v1/recall", b'{"namespace": "n"}', 400, "invalid_request"),
    ("POST", "/v1/recall", b'{"query": "q"}', 400, "invalid_request"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": ""}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "k": 0}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "k": -1}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "k": 100000000}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "k": "ten"}', 400, "invalid_request"),
    (
        "POST",
        "/v1/recall",
        b'{"namespace": "n", "query": "q", "routes": ["teleport"]}',
        400,
        "invalid_request",
    ),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "routes": []}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "fusion": "magic"}', 400, "invalid_request"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "deadline_ms": -5}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "thresholds": {"vector": 1.5}}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "thresholds": {"vector": -2}}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "thresholds": {"fts": 0.5}}', 400, "invalid_request"),
    (
        "POST",
        "/v1/recall",
        b'{"namespace": "n", "query": "q", "thresholds": {"vector": "high"}}',
        400,
        "invalid_request",
    ),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "attributes": [1]}', 400, "invalid_request"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q", "kinds": [""]}', 400, "invalid_value"),
    ("POST", "/v1/recall", b'{"namespace": "n", "query": "q\\u0000"}', 400, "invalid_value"),
]


def test_a_body_that_does_not_decompress_is_a_400(daemon: Daemon) -> None:
    response = daemon.http.post(
        "/v1/records", content=b"notgzip", headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )
    assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_request")


def count_rows(dsn: str) -> int:
    return int(sql(dsn, "SELECT count(*) AS n FROM records")[0]["n"])


def test_there_are_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


@pytest.mark.parametrize(
    ("method", "path", "raw", "status", "code"), CASES, ids=[f"{i:02d}" for i in range(len(CASES))]
)
def test_bad_request_is_a_4xx_with_a_stable_code_and_writes_nothing(
    daemon: Daemon, method: str, path: str, raw: bytes | None, status: int, code: str
) -> None:
    dsn = daemon.env["RECALLD_STORE_DSN"]
    before = settled_snapshot(dsn, quiet_s=0.2)
    got_status, body = daemon.call(method, path, raw=raw) if raw is not None else daemon.call(method, path)
    assert (got_status, body["error"]["code"]) == (status, code), body
    assert body["error"]["message"]
    after = store_snapshot(dsn)
    assert after == before, [table for table in after if after[table] != before.get(table)]


def test_the_daemon_still_serves_after_the_bad_requests(daemon: Daemon) -> None:
    status, _ = daemon.call("POST", "/v1/records", json.loads(with_(title="After the storm")))
    assert status == 201


def test_a_body_that_stalls_is_a_408_and_writes_nothing(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(env={"RECALLD_SERVER_BODY_TIMEOUT_S": "1"})
    dsn = daemon.env["RECALLD_STORE_DSN"]
    body = with_(title="Half sent")
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(30)
        client.connect(str(daemon.socket))
        head = f"POST /v1/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        client.sendall(head.encode() + body[:10])  # then nothing: a client stuck mid-body
        started = time.monotonic()
        answer = b""
        while b"}}" not in answer:  # the whole error body (the connection closes later, once aiohttp stops lingering)
            chunk = client.recv(65536)
            assert chunk, answer
            answer += chunk
        waited = time.monotonic() - started
    head, _, error = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"Connection: close" in head, answer
    assert json.loads(error)["error"]["code"] == "body_timeout"
    assert 0.9 < waited < 5, waited
    assert count_rows(dsn) == 0
    assert daemon.call("POST", "/v1/records", json.loads(body))[0] == 201, "the handler was freed"


def test_a_connection_that_stalls_before_its_request_is_closed(make_daemon: Any) -> None:
    daemon: Daemon = make_daemon(env={"RECALLD_SERVER_IDLE_TIMEOUT_S": "1"})
    for sent in (b"", b"POST /v1/records HTTP/1.1\r\nHost: x\r\n"):  # nothing, then half the headers
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(30)
            started = time.monotonic()  # the daemon's clock starts when it accepts the connection
            client.connect(str(daemon.socket))
            client.sendall(sent)
            assert client.recv(65536) == b"", "the daemon closes the connection without answering"
            assert 0.9 < time.monotonic() - started < 5
    assert daemon.call("GET", "/livez")[0] == 200
