"""`Client.backup` and `AsyncClient.backup`: `GET /admin/backup` streamed into a directory, the
manifest line first and the dump's SHA-256 and size checked as it arrives. Against a real daemon
a backup is whole; against a loopback server on a Unix socket that speaks HTTP/1.1 as the
daemon does but breaks off or leaves out a part, nothing is taken for a backup and nothing is
left in the directory (one the call made is removed)."""

from __future__ import annotations

import hashlib
import json
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import msgspec
import pytest

from recalld.client import AsyncClient, Client, ClientError
from recalld.wire.backup import DUMP_FILE, MANIFEST_FILE, BackupError, Manifest
from tests.support import Daemon, namespace

MANIFEST = {
    "format": "recalld-backup",
    "format_version": 1,
    "created_at": "2026-12-02T10:00:00Z",
    "schema_version": 14,
    "server_version": "17.2",
    "counts": {"records": 1},
    "vector_spaces": [],
}
LINE = json.dumps(MANIFEST).encode()
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-recalld-backup\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


END = b"0\r\n\r\n"


class Scripted(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Answers every request with `reply`, then closes the connection."""

    daemon_threads = True
    reply = b""


class Answer(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        connection: socket.socket = self.request
        seen = b""
        while b"\r\n\r\n" not in seen and (data := connection.recv(4096)):
            seen += data
        assert isinstance(self.server, Scripted)
        connection.sendall(self.server.reply)


@pytest.fixture
def loopback(tmp_path: Path) -> Iterator[Scripted]:
    server = Scripted(str(tmp_path / "recalld.sock"), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_backup_from_the_daemon_is_whole_and_checked(daemon: Daemon, tmp_path: Path) -> None:
    status, _ = daemon.call("POST", "/v1/records", {"namespace": namespace(), "kind": "doc", "title": "a", "body": "b"})
    assert status == 201
    dest = tmp_path / "new" / "backup"
    with Client(daemon.socket) as recalld:
        manifest = recalld.backup(dest)
    assert isinstance(manifest, Manifest) and manifest.dump is not None
    dump = (dest / DUMP_FILE).read_bytes()
    assert (manifest.dump.bytes, manifest.dump.sha256) == (len(dump), hashlib.sha256(dump).hexdigest())
    assert msgspec.json.decode((dest / MANIFEST_FILE).read_bytes(), type=Manifest) == manifest
    assert sorted(p.name for p in dest.iterdir()) == [DUMP_FILE, MANIFEST_FILE]
    assert dest.stat().st_mode & 0o777 == 0o700, "records are in it: its owner's alone"
    with Client(daemon.socket) as recalld, pytest.raises(BackupError, match="not empty"):
        recalld.backup(dest)  # never over another backup
    assert sorted(p.name for p in dest.iterdir()) == [DUMP_FILE, MANIFEST_FILE]


@pytest.fixture
def given(tmp_path: Path) -> Path:
    """An empty directory the caller made: a failed backup leaves it, empty."""
    path = tmp_path / "given"
    path.mkdir()
    return path


@pytest.mark.anyio
@pytest.mark.anyio_backends("asyncio", "trio", real_clock=True)
async def test_the_async_client_writes_the_same_backup(daemon: Daemon, given: Path) -> None:
    async with AsyncClient(daemon.socket) as recalld:
        manifest = await recalld.backup(given)
    assert manifest.dump is not None
    dump = await anyio.Path(given / DUMP_FILE).read_bytes()
    assert manifest.dump.sha256 == hashlib.sha256(dump).hexdigest() and manifest.dump.bytes == len(dump)
    written = await anyio.Path(given / MANIFEST_FILE).read_bytes()
    assert msgspec.json.decode(written, type=Manifest) == manifest


BROKEN = {
    "a stream that breaks off": (HEAD + chunk(LINE + b"\nPGDMP") + chunk(b"more of it"), "broke off after 15 bytes"),
    "no manifest line": (HEAD + chunk(b"PGDMP and no newline") + END, "did not begin with a manifest"),
    "a manifest line that is none": (HEAD + chunk(b'{"format": 1}\nPGDMP') + END, "manifest"),
    "an empty dump": (HEAD + chunk(LINE + b"\n") + END, "empty dump"),
}


@pytest.mark.parametrize(("reply", "said"), list(BROKEN.values()), ids=list(BROKEN))
def test_a_broken_answer_is_no_backup_and_leaves_nothing(
    loopback: Scripted, tmp_path: Path, given: Path, reply: bytes, said: str
) -> None:
    loopback.reply = reply
    made = tmp_path / "made"
    with Client(loopback.server_address) as recalld:
        for dest in (made, given):
            with pytest.raises(BackupError, match=said):
                recalld.backup(dest)
    assert not made.exists(), "the directory the call made is gone"
    assert list(given.iterdir()) == [], "the caller's directory stays, empty"


@pytest.mark.anyio
@pytest.mark.anyio_backends("asyncio", "trio", real_clock=True)
@pytest.mark.parametrize(("reply", "said"), list(BROKEN.values()), ids=list(BROKEN))
async def test_the_async_client_takes_no_broken_answer_either(
    loopback: Scripted, given: Path, reply: bytes, said: str
) -> None:
    loopback.reply = reply
    async with AsyncClient(loopback.server_address) as recalld:
        with pytest.raises(BackupError, match=said):
            await recalld.backup(given)
    assert [entry async for entry in anyio.Path(given).iterdir()] == []


def test_a_refusal_is_a_client_error_and_makes_nothing(loopback: Scripted, tmp_path: Path) -> None:
    body = b'{"error": {"code": "forbidden", "message": "administrators only"}}'
    loopback.reply = (
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    made = tmp_path / "made"
    with Client(loopback.server_address) as recalld, pytest.raises(ClientError) as refused:
        recalld.backup(made)
    assert (refused.value.status, refused.value.code) == (403, "forbidden")
    assert not made.exists()
