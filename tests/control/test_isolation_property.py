"""Who may touch what, as a property over random interleavings: peers with different `[access]`
rights (real uids, told apart by SO_PEERCRED: each peer is a client process running as its own
user) write, forget, read, recall, check duplicates, ask for stats, usage and admin routes, in an
order drawn from a seeded generator. Every answer is the one the rights call for (the status of
the rule below), and no answer to a peer holds an id, a title or the name of a namespace it may
not read, unless the peer named it itself.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support import Daemon, namespace
from tests.support.embedding_service import EmbeddingServer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")

SEEDS = [1, 2, 3]
STEPS = 90

# Runs as the peer's user: one request per line of stdin, over a connection of its own; one answer per line.
WORKER = """
import json, socket, sys
path = sys.argv[1]
for line in sys.stdin:
    method, target, body = json.loads(line)
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(path)
    head = f"{method} {target} HTTP/1.1\\r\\nHost: recalld\\r\\nConnection: close\\r\\n"
    if body:
        head += f"Content-Type: application/json\\r\\nContent-Length: {len(body.encode())}\\r\\n"
    s.sendall((head + "\\r\\n" + body).encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    status_line, _, rest = data.decode().partition("\\r\\n")
    print(json.dumps([int(status_line.split()[1]), rest.partition("\\r\\n\\r\\n")[2]]), flush=True)
"""


@dataclass
class Peer:
    uid: int
    reads: set[str]
    writes: set[str]
    proc: subprocess.Popen[str] | None = None

    def may_read(self, ns: str) -> bool:
        return ns in self.reads or ns in self.writes

    def call(self, method: str, target: str, body: Any = None) -> tuple[int, str]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([method, target, json.dumps(body) if body is not None else ""]) + "\n")
        self.proc.stdin.flush()
        status, text = json.loads(self.proc.stdout.readline())
        return int(status), str(text)


@dataclass
class World:
    records: dict[str, tuple[str, str]] = field(default_factory=dict)
    """id -> (namespace, title), every record ever created."""
    forgotten: set[str] = field(default_factory=set)


@pytest.fixture
def setting(make_daemon: Any) -> Iterator[tuple[Daemon, list[Peer], list[str]]]:
    fake = EmbeddingServer(64)
    a, b, c = namespace(), namespace(), namespace()
    peers = [
        Peer(65534, reads={a}, writes=set()),
        Peer(65533, reads=set(), writes={b}),
        Peer(65532, reads={a}, writes={c}),
    ]
    readers = ", ".join(f'"{p.uid}" = {json.dumps(sorted(p.reads))}' for p in peers if p.reads)
    writers = ", ".join(f'"{p.uid}" = {json.dumps(sorted(p.writes))}' for p in peers if p.writes)
    daemon: Daemon = make_daemon(
        env={
            **fake.env(),
            "RECALLD_SERVER_SOCKET_MODE": str(0o666),  # the access layer decides, not the file mode
            "RECALLD_ACCESS_READERS": f"{{ {readers} }}",
            "RECALLD_ACCESS_WRITERS": f"{{ {writers} }}",
        }
    )
    for peer in peers:
        peer.proc = subprocess.Popen(
            [
                "setpriv",
                f"--reuid={peer.uid}",
                f"--regid={peer.uid}",
                "--clear-groups",
                sys.executable,
                "-c",
                WORKER,
                str(daemon.socket),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
    yield daemon, peers, [a, b, c]
    for peer in peers:
        assert peer.proc is not None
        peer.proc.stdin.close()  # type: ignore[union-attr]
        peer.proc.wait(30)
    fake.close()


def expected(peer: Peer, world: World, op: str, ns: str, rid: str) -> set[int]:
    """The statuses the rights allow for one operation."""
    readable = peer.may_read(ns)
    if op == "create":
        return {201} if ns in peer.writes else {403}
    if op == "get":
        return {200} if readable and rid not in world.forgotten else {404}
    if op == "forget":
        if ns in peer.writes:
            return {200} if rid not in world.forgotten else {404}
        return {403, 404} if readable else {404}
    if op in ("recall", "check", "stats", "usage", "list"):
        return {200} if readable else {403}
    return {403}  # usage of every namespace, rebuild, backup: administrators only


@pytest.mark.parametrize("seed", SEEDS)
def test_random_interleavings_leak_nothing_and_refuse_by_the_rules(
    setting: tuple[Daemon, list[Peer], list[str]], seed: int
) -> None:
    daemon, peers, spaces = setting
    rng = random.Random(seed)
    world = World()
    for ns in spaces:  # something of every namespace to leak
        for i in range(3):
            title = f"secret {ns} {i} {uuid.uuid4().hex[:6]}"
            status, created = daemon.call(
                "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": f"the plan {i}"}
            )
            assert status == 201, created
            world.records[created["id"]] = (ns, title)
    ops = ["create", "get", "forget", "recall", "check", "stats", "usage", "list", "all-usage", "rebuild", "backup"]
    for step in range(STEPS):
        peer = rng.choice(peers)
        op = rng.choice(ops)
        ns = rng.choice(spaces)
        rid = rng.choice(sorted(world.records))
        if op in ("get", "forget"):
            ns = world.records[rid][0]
        title = f"secret {ns} p{peer.uid} {step} {uuid.uuid4().hex[:6]}"
        request: tuple[str, str, Any] = {
            "create": ("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": "theirs"}),
            "get": ("GET", f"/v1/records/{rid}", None),
            "forget": ("DELETE", f"/v1/records/{rid}", None),
            "recall": ("POST", "/v1/recall", {"namespace": ns, "query": "secret plan", "k": 50}),
            "check": ("POST", "/v1/duplicates/check", {"namespace": ns, "kind": "doc", "title": "secret plan"}),
            "stats": ("GET", f"/v1/stats?namespace={ns}", None),
            "usage": ("GET", f"/v1/usage?namespace={ns}", None),
            "list": ("GET", f"/v1/records?namespace={ns}", None),
            "all-usage": ("GET", "/v1/usage", None),
            "rebuild": ("POST", "/admin/generations/rebuild", {}),
            "backup": ("GET", "/admin/backup", None),
        }[op]
        allowed = expected(peer, world, op, ns, rid)
        status, text = peer.call(*request)
        where = f"seed {seed} step {step}: uid {peer.uid} {op} {ns} -> {status} {text[:300]}"
        assert status in allowed, where
        if op == "create" and status == 201:
            world.records[json.loads(text)["id"]] = (ns, title)
        if op == "forget" and status == 200:
            world.forgotten.add(rid)
        asked = json.dumps(request)
        for other in {n for n in spaces if not peer.may_read(n)}:
            assert other not in text or other in asked, f"{where}: names {other}"
        for hidden, (owner, hidden_title) in world.records.items():
            if not peer.may_read(owner):
                assert hidden not in text or hidden in asked, f"{where}: shows the id {hidden}"
                assert hidden_title not in text, f"{where}: shows the title {hidden_title}"
        if status == 200 and op in ("recall", "list"):
            ids = {hit["id"] for hit in json.loads(text).get("results", json.loads(text).get("records", []))}
            assert all(world.records[i][0] == ns for i in ids), f"{where}: another namespace's records"
            assert not ids & world.forgotten, f"{where}: a forgotten record"
