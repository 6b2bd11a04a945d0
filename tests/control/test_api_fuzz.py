"""Every route of docs/openapi.json fuzzed against ONE real daemon: zero 5xx,
no crash, the daemon still ready, and a refused request writes nothing anywhere.

How the routes are exercised: requests are generated from each operation's JSON schemas
(tests/support/schema_fuzz.py, a fixed seed) and sent over a pool of keep-alive connections on
the Unix socket, as root (an administrator, so admin routes do their work too):
- refused requests (`REFUSED`): for every route that takes a JSON body, bodies that violate its
  schema by construction; each must answer 4xx with an error code, and a whole-store digest
  (tests/support/snapshot.py: every table) is the same after all of them as before;
- generated requests (`GENERATED`): requests the schemas allow, on every route, paths' ids drawn
  from records that exist and from random uuids; none may answer 5xx. Writes land in two
  namespaces. The rebuild and backup routes start real work (a build, a pg_dump), so they get
  a few requests each (`COSTLY`) rather than their share; a rollback's ids are mostly unknown.
  Every success answer must decode as the wire type the description gives its route;
- the race the fuzzer found (a duplicates audit while creates add titles), alone and heavier;
- hand-written hostile requests: invalid UTF-8, NULs, lone surrogates, deep nesting, 5 MB
  strings, wrong methods and content types (4xx, nothing written), and a slow-loris client that
  the daemon drops while it keeps serving others;
- as a non-admin peer (a client process that drops to uid 65534, which `[access]` grants every
  namespace): each admin route once, 403 `forbidden` and nothing written; then
  `NON_ADMIN_REQUESTS` generated requests (a third of them schema-violating) on every route over
  one keep-alive connection: no 5xx, and every admin route among them 403.

The embedding provider is tests/support/embedding_service on loopback (8 dimensions), not the local
model: every route does its real work, vector recall, duplicate checks and audits, index builds
included, but an embedding costs a hash rather than the model's CPU, so 10,000 requests fit in
about a minute on two cores. (With no provider at all the audit route answers 503
`route_unavailable` by design, which would hide the routes' real paths from the fuzzer.)
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from recalld.control.api_doc import ROUTES
from recalld.store.embedded import EmbeddedPostgres
from tests.support import ROOT, Daemon, create_database, scratch_dir
from tests.support.embedding_service import EmbeddingServer
from tests.support.schema_fuzz import Generator, Request, quote
from tests.support.snapshot import settled_snapshot
from tests.support.waits import wait_for_generation

SEED = int(os.environ.get("FUZZ_SEED", "23"))
"""Another seed (`FUZZ_SEED=N`) explores other requests; CI runs the one the figures are from."""
REFUSED = 4_000
GENERATED = 6_500
CONNECTIONS = 6
NON_ADMIN_REQUESTS = 1_500
NAMESPACES = ["fuzz-a", "fuzz-b"]
COSTLY = {("POST", "/admin/generations/rebuild"): 3, ("GET", "/admin/backup"): 2}
"""Routes that start real work (a build, a pg_dump) get this many generated requests in all."""

DOCUMENT: dict[str, Any] = json.loads((ROOT / "docs" / "openapi.json").read_text())
OPERATIONS = [(method.upper(), path, op) for path, ops in DOCUMENT["paths"].items() for method, op in ops.items()]
FIGURES: dict[str, Any] = {}
"""What the run saw, printed at the end (`pytest -s`) for docs/RELIABILITY.md."""


@pytest.fixture(scope="module")
def fuzzed(postgres: EmbeddedPostgres) -> Iterator[tuple[Daemon, list[str]]]:
    home = scratch_dir("recalld-test-fuzz-")
    fake = EmbeddingServer(dimension=8)
    env = {
        "RECALLD_STORE_DSN": create_database(postgres),
        **fake.env(),
        "RECALLD_SERVER_BODY_TIMEOUT_S": "2",
        "RECALLD_SERVER_IDLE_TIMEOUT_S": "3",
        "RECALLD_SERVER_SOCKET_MODE": str(0o666),  # the access layer, not the file mode, decides
        "RECALLD_ACCESS_READERS": '{ "65534" = ["*"] }',
        "RECALLD_ACCESS_WRITERS": '{ "65534" = ["*"] }',
        "RECALLD_LOG_LEVEL": "info",
        # no assignments tick mid-module: a tick between two snapshots reads as a refused write
        "RECALLD_ASSIGNMENTS_INTERVAL_S": "86400",
        # nor a full pass of the index manager (every recheck_s), which deletes the title vectors
        # that the fuzz's creates stored and its forgets left without a live title
        "RECALLD_INDEX_RECHECK_S": "86400",
    }
    daemon = Daemon(home, env).start()
    ids = []
    for i in range(6):
        status, body = daemon.call(
            "POST",
            "/v1/records",
            {"namespace": NAMESPACES[i % 2], "kind": "doc", "title": f"Seed {i}", "body": f"seed body {i}"},
        )
        assert status == 201, body
        ids.append(body["id"])
    wait_for_generation(daemon, lambda current: current["count"] >= len(ids))
    yield daemon, ids
    code = daemon.stop()
    fake.close()
    print(f"\nfuzz figures: {json.dumps(FIGURES, sort_keys=True)}")
    shutil.rmtree(home, ignore_errors=True)
    assert code == 0, f"daemon did not exit cleanly ({code})"


def client(daemon: Daemon) -> httpx.Client:
    transport = httpx.HTTPTransport(uds=str(daemon.socket))
    return httpx.Client(transport=transport, base_url="http://recalld", timeout=60)


def send_all(daemon: Daemon, requests: list[Request]) -> list[tuple[Request, int, Any]]:
    """Every request over `CONNECTIONS` keep-alive connections; (request, status, JSON body or text)."""
    shares = [requests[i::CONNECTIONS] for i in range(CONNECTIONS)]

    def run(share: list[Request]) -> list[tuple[Request, int, Any]]:
        answers = []
        with client(daemon) as http:
            for request in share:
                headers = {"Content-Type": "application/json"} if request.body is not None else {}
                response = http.request(request.method, request.target, content=request.body, headers=headers)
                try:
                    body: Any = response.json()
                except ValueError:
                    body = response.text[:200]
                answers.append((request, response.status_code, body))
        return answers

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        return [answer for answers in pool.map(run, shares) for answer in answers]


def logged_errors(daemon: Daemon) -> list[str]:
    """The daemon's error lines (with their tracebacks), for a failure message."""
    text = daemon.log_path.read_text(errors="replace")
    return [line[:3000] for line in text.splitlines() if '"level": "error"' in line or '"level": "critical"' in line][
        :5
    ]


def assert_alive_and_ready(daemon: Daemon) -> None:
    assert daemon.proc is not None and daemon.proc.poll() is None, f"the daemon died:\n{daemon.log()}"
    status, body = daemon.call("GET", "/readyz")
    assert status == 200, body


def test_every_route_is_fuzzed_from_the_description() -> None:
    bodied = [(m, p) for m, p, op in OPERATIONS if "requestBody" in op]
    assert len(OPERATIONS) >= 31 and len(bodied) >= 12, "the description lost routes"
    assert REFUSED + GENERATED >= 10_000


def test_requests_violating_the_schemas_are_refused_and_write_nothing(fuzzed: tuple[Daemon, list[str]]) -> None:
    daemon, ids = fuzzed
    generator = Generator(DOCUMENT, SEED, NAMESPACES, ids)
    bodied = [(m, p, op) for m, p, op in OPERATIONS if "requestBody" in op]
    requests = [generator.request(*bodied[i % len(bodied)], refuse=True) for i in range(REFUSED)]
    before = settled_snapshot(daemon.env["RECALLD_STORE_DSN"])
    started = time.monotonic()
    answers = send_all(daemon, requests)
    elapsed = time.monotonic() - started
    wrong = [
        f"{status} {request.show()} -> {body}"
        for request, status, body in answers
        if not (400 <= status < 500 and isinstance(body, dict) and body.get("error", {}).get("code"))
    ]
    assert not wrong, f"{len(wrong)} refused requests not answered 4xx with a code:\n" + "\n".join(wrong[:20])
    assert settled_snapshot(daemon.env["RECALLD_STORE_DSN"]) == before, "a refused request wrote something"
    assert_alive_and_ready(daemon)
    FIGURES["refused"] = {
        "requests": len(answers),
        "routes": len({(r.method, r.path) for r, _, _ in answers}),
        "statuses": dict(Counter(str(s) for _, s, _ in answers)),
        "seconds": round(elapsed, 1),
    }


def test_generated_requests_on_every_route_never_answer_5xx(fuzzed: tuple[Daemon, list[str]]) -> None:
    daemon, ids = fuzzed
    generator = Generator(DOCUMENT, SEED + 1, NAMESPACES, ids)
    cheap = [(m, p, op) for m, p, op in OPERATIONS if (m, p) not in COSTLY]
    requests = [generator.request(*cheap[i % len(cheap)], refuse=False) for i in range(GENERATED)]
    for (method, path), count in COSTLY.items():
        operation = DOCUMENT["paths"][path][method.lower()]
        requests += [generator.request(method, path, operation, refuse=False) for _ in range(count)]
    started = time.monotonic()
    answers = send_all(daemon, requests)
    elapsed = time.monotonic() - started
    errors = [f"{status} {request.show()} -> {body}" for request, status, body in answers if status >= 500]
    assert not errors, f"{len(errors)} answers were 5xx:\n" + "\n".join([*errors[:20], *logged_errors(daemon)])
    assert {(r.method, r.path) for r, _, _ in answers} == {(m, p) for m, p, _ in OPERATIONS}, "a route was missed"
    undocumented = {
        (r.method, r.path, status)
        for r, status, body in answers
        if str(status) not in DOCUMENT["paths"][r.path][r.method.lower()]["responses"]
        # the router matched no route: a parameter sent empty, or with a "/", "{" or "}" in it
        # (aiohttp's parameters match [^{}/]+), names a path no route has
        and not (status == 404 and isinstance(body, dict) and body["error"]["code"] == "unknown_route")
    }
    assert not undocumented, f"statuses docs/openapi.json does not list: {sorted(undocumented)}"
    # every success answer decodes as the wire type the description gives for it
    unlike = []
    for request, status, body in answers:
        response = ROUTES[(request.method, request.path)].response
        if 200 <= status < 300 and response is not None:
            try:
                msgspec.json.decode(msgspec.json.encode(body), type=response)
            except msgspec.ValidationError as exc:
                unlike.append(f"{status} {request.show()}: {exc}; {str(body)[:300]}")
    assert not unlike, f"{len(unlike)} answers unlike their description:\n" + "\n".join(unlike[:10])
    statuses = Counter(status for _, status, _ in answers)
    assert statuses[200] + statuses[201] + statuses[202] > len(answers) // 10, f"mostly refused: {statuses}"
    assert_alive_and_ready(daemon)
    FIGURES["generated"] = {
        "requests": len(answers),
        "routes": len({(r.method, r.path) for r, _, _ in answers}),
        "statuses": dict(Counter(str(s) for s in statuses.elements())),
        "seconds": round(elapsed, 1),
    }


def test_a_duplicates_audit_racing_creates_of_new_titles_answers(fuzzed: tuple[Daemon, list[str]]) -> None:
    """Found by the fuzzer: an audit of a namespace of several kinds, while creates add titles
    the daemon had not read, answered 500 (a title added between two kinds' comparisons had no
    position in the first kind's members)."""
    daemon, _ = fuzzed
    ns = "fuzz-race"
    kinds = [f"k{i}" for i in range(8)]

    def create(i: int) -> int:
        status, _ = daemon.call(
            "POST",
            "/v1/records",
            {"namespace": ns, "kind": kinds[i % len(kinds)], "title": f"Race title {i}", "body": "b"},
        )
        return status

    def audit(_: int) -> tuple[int, Any]:
        with client(daemon) as http:
            response = http.post("/v1/duplicates/audit", json={"namespace": ns})
            return response.status_code, response.text[:300]

    with ThreadPoolExecutor(CONNECTIONS) as pool:
        creates = [pool.submit(create, i) for i in range(300)]
        audits = [pool.submit(audit, i) for i in range(300)]
        assert {c.result() for c in creates} == {201}
        failed = [a.result() for a in audits if a.result()[0] != 200]
    assert not failed, "\n".join([*map(str, failed[:5]), *logged_errors(daemon)])


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def record(**fields: str) -> bytes:
    return json.dumps({"namespace": NAMESPACES[0], "kind": "doc", "title": "T", "body": "B", **fields}).encode()


def hostile(ids: list[str]) -> list[tuple[str, str, bytes | None, str | None]]:
    """(method, target, body, content type): every one must be refused with a 4xx."""
    some = ids[0]
    five_mb = "x" * (5 * 1024 * 1024)
    bodies = [
        b"\xff\xfe\xfd not utf-8",
        b'{"namespace": "fuzz-a", "kind": "doc", "title": "\xc3\x28", "body": "b"}',
        record(title="nul\u0000inside"),
        record(body="\u0000"),
        b'{"namespace": "fuzz-a", "kind": "doc", "title": "\\ud800", "body": "lone surrogate"}',
        b'{"namespace": "fuzz-a", "kind": "doc", "title": "t", "body": "\\udfff\\ud800"}',
        b'{"namespace": "fuzz-a\\u0000", "kind": "doc", "title": "t", "body": "b"}',
        nested(100_000).encode(),
        (
            '{"namespace": "fuzz-a", "kind": "doc", "title": "t", "body": "b", "attributes": ' + nested(5000) + "}"
        ).encode(),
        record(title=five_mb),
        record(namespace=five_mb),
        json.dumps({"namespace": NAMESPACES[0], "query": five_mb}).encode(),
        b"",
        b"\x00" * 1024,
    ]
    cases: list[tuple[str, str, bytes | None, str | None]] = []
    for target in ("/v1/records", "/v1/recall", "/v1/records:batch", f"/v1/records/{some}"):
        method = "PUT" if target.startswith("/v1/records/") else "POST"
        cases += [(method, target, body, "application/json") for body in bodies]
    cases += [
        ("POST", "/v1/records", b"namespace=fuzz-a&kind=doc&title=t&body=b", "application/x-www-form-urlencoded"),
        (
            "POST",
            "/v1/records",
            b"--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--",
            "multipart/form-data; boundary=b",
        ),
        ("POST", "/v1/recall", b"<recall/>", "application/xml"),
    ]
    for method in ("PATCH", "TRACE", "PUT", "DELETE"):
        cases += [(method, "/v1/recall", record(), "application/json"), (method, "/v1/stats", None, None)]
    cases += [
        ("POST", "/v1/records/" + some, record(), "application/json"),
        ("PATCH", "/v1/records/" + some, record(), "application/json"),
        ("GET", "/v1/records/not-a-uuid", None, None),
        ("DELETE", "/v1/records/%00", None, None),
        ("DELETE", "/v1/records/" + "f" * 5000, None, None),
        ("GET", "/v1/records?namespace=fuzz-a&limit=-1", None, None),
        ("GET", "/v1/records?namespace=fuzz-a&after=%ff%fe", None, None),
        ("GET", "/v1/records?namespace=%00", None, None),
        ("GET", "/v1/stats?namespace=fuzz-a&k=99999999999999999999", None, None),
        ("POST", "/admin/generations/not-a-uuid/activate", None, None),
        ("GET", "/v1/assignments/%ff%fe", None, None),
    ]
    return cases


def test_hand_written_hostile_requests_are_refused_and_write_nothing(fuzzed: tuple[Daemon, list[str]]) -> None:
    daemon, ids = fuzzed
    before = settled_snapshot(daemon.env["RECALLD_STORE_DSN"])
    wrong = []
    with client(daemon) as http:
        for method, target, body, content_type in hostile(ids):
            headers = {"Content-Type": content_type} if content_type else {}
            response = http.request(method, target, content=body, headers=headers)
            if not 400 <= response.status_code < 500:
                wrong.append(f"{response.status_code} {method} {target} {(body or b'')[:80]!r}: {response.text[:200]}")
    assert not wrong, "\n".join(wrong)
    assert settled_snapshot(daemon.env["RECALLD_STORE_DSN"]) == before, "a refused request wrote something"
    assert_alive_and_ready(daemon)


def test_a_slow_loris_is_dropped_while_others_are_served(fuzzed: tuple[Daemon, list[str]]) -> None:
    daemon, _ = fuzzed
    loris = []
    for partial in (
        b"GET /v1/stats?namespace=fuzz-a HTTP/1.1\r\nHost: rec",
        b'POST /v1/records HTTP/1.1\r\nHost: recalld\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"name',
    ):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(60)
        sock.connect(str(daemon.socket))
        sock.sendall(partial)
        loris.append(sock)
    # another client is served while the loris holds its connections
    assert daemon.call("GET", "/livez")[0] == 200
    answers = []
    for sock in loris:
        data = b""
        while chunk := sock.recv(65536):  # the daemon closes the connection: the stall is over
            data += chunk
        sock.close()
        answers.append(data)
    # headers never finished: closed without an answer (or a 4xx); a body never finished: 408
    assert answers[0] == b"" or answers[0].split(b" ", 2)[1].startswith(b"4"), answers[0][:200]
    assert answers[1].split(b" ", 2)[1] == b"408", answers[1][:200]
    assert_alive_and_ready(daemon)


# Imports as root (the interpreter lives under root's 0700 home, as tests/support/as_user.py
# says), then becomes uid 65534 for good and sends the requests on stdin ([method, target, body
# or null], bodies as latin-1 text) over one keep-alive connection; prints [status, code] each.
NON_ADMIN = """
import json, os, sys, http.client, socket
os.setgroups([]); os.setgid(65534); os.setuid(65534)
class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX); self.sock.settimeout(60); self.sock.connect(sys.argv[1])
conn = Conn("recalld")
out = []
for method, target, body in json.load(sys.stdin):
    body = body.encode("latin-1") if body is not None else None
    conn.request(method, target, body=body, headers={"Content-Type": "application/json"} if body is not None else {})
    r = conn.getresponse(); data = r.read()
    out.append([r.status, json.loads(data)["error"]["code"] if r.status >= 400 else None])
print(json.dumps(out))
"""


def as_non_admin(daemon: Daemon, requests: list[tuple[str, str, bytes | None]]) -> list[tuple[int, str | None]]:
    """(status, error code) of each request, sent by a peer of uid 65534."""
    sent = [[method, target, body.decode("latin-1") if body is not None else None] for method, target, body in requests]
    done = subprocess.run(
        [sys.executable, "-c", NON_ADMIN, str(daemon.socket)],
        input=json.dumps(sent),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path("/"),
    )
    assert done.returncode == 0, done.stderr
    return [(status, code) for status, code in json.loads(done.stdout)]


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_admin_routes_refuse_a_non_admin_peer(fuzzed: tuple[Daemon, list[str]]) -> None:
    daemon, ids = fuzzed
    before = settled_snapshot(daemon.env["RECALLD_STORE_DSN"])
    admin = [(m, p.replace("{id}", ids[0])) for m, p, _ in OPERATIONS if p.startswith("/admin/")]
    assert len(admin) >= 8
    answers = as_non_admin(daemon, [(m, t, b"{}" if m in ("POST", "PUT") else None) for m, t in admin])
    assert answers == [(403, "forbidden")] * len(admin), list(zip(admin, answers, strict=True))
    assert settled_snapshot(daemon.env["RECALLD_STORE_DSN"]) == before
    assert_alive_and_ready(daemon)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_generated_requests_as_a_non_admin_peer_never_answer_5xx(fuzzed: tuple[Daemon, list[str]]) -> None:
    daemon, ids = fuzzed
    generator = Generator(DOCUMENT, SEED + 2, NAMESPACES, ids)
    requests = [
        generator.request(*OPERATIONS[i % len(OPERATIONS)], refuse=i % 3 == 0) for i in range(NON_ADMIN_REQUESTS)
    ]
    answers = as_non_admin(daemon, [(r.method, r.target, r.body) for r in requests])
    errors = [f"{status} {r.show()}" for r, (status, _) in zip(requests, answers, strict=True) if status >= 500]
    assert not errors, "\n".join([*errors[:20], *logged_errors(daemon)])
    refused_admin = [a for r, a in zip(requests, answers, strict=True) if r.path.startswith("/admin/")]
    assert refused_admin and set(refused_admin) == {(403, "forbidden")}
    assert_alive_and_ready(daemon)
    FIGURES["non_admin"] = {"requests": len(answers), "statuses": dict(Counter(str(s) for s, _ in answers))}


def test_the_daemon_logged_no_error_all_along(fuzzed: tuple[Daemon, list[str]]) -> None:
    """A fuzzed request that fails in the background (an index build, a telemetry batch) answers
    nothing the fuzzer sees: the daemon's own error lines are the only witness."""
    daemon, _ = fuzzed
    assert logged_errors(daemon) == []
    assert_alive_and_ready(daemon)


def test_an_entity_named_with_braces_is_addressable_by_its_routes(fuzzed: tuple[Daemon, list[str]]) -> None:
    """Found by the fuzzer: names with "{" or "}" are taken by POST /v1/observations, but the
    router's default parameter pattern ([^{}/]+) answered their routes 404 `unknown_route`."""
    daemon, _ = fuzzed
    entity, characteristic = "sku{42}", "size{cm}"
    with client(daemon) as http:
        put = http.put(f"/v1/assignments/{quote(entity)}/{quote(characteristic)}", json={"value": "10"})
        assert put.status_code == 200, put.text
        got = http.get(f"/v1/assignments/{quote(entity)}")
        assert got.status_code == 200, got.text
        deleted = http.delete(f"/v1/assignments/{quote(entity)}/{quote(characteristic)}")
        assert deleted.status_code == 200, deleted.text
