"""The Python client of the control socket, sync (`Client`) and async (`AsyncClient`, on any
anyio backend), shared by the CLI, `recalld ingest` and the benches.

    from recalld.client import Client
    with Client() as recalld:                      # --socket, $RECALLD_SOCKET or the default
        created = recalld.create_record("team", "rule", "Refunds", "Two managers approve.")
        answer = recalld.recall("team", "who approves refunds", k=5)
        print(answer.results[0].title, answer.degraded_routes)

The typed methods send and answer the daemon's own msgspec wire types (daemon/wire/;
docs/API.md lists the routes); `request` sends any route and answers its JSON as plain data;
`backup(directory)` streams a backup of the store into a directory, checked as it arrives.
A refusal by the daemon (any 4xx or 5xx) raises `ClientError` with its `{"error": ...}` body
(`code`, and `existing_id` on a 409 `exact_duplicate`); no answer at all (nobody listening, a
queue that stays full, a socket directory another user could control) raises `ConnectionError`.
A record id that is no UUID raises `InvalidId` (a ValueError) before anything is sent.
"""

from __future__ import annotations

import errno
import logging
import os
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, TypeVar

import anyio
import httpx
import msgspec

from recalld.client.backup import READ_TIMEOUT_S, BackupWriter
from recalld.client.calls import AsyncCalls, Calls
from recalld.client.routes import Call
from recalld.client.routes import InvalidId as InvalidId  # the client's to raise, as ClientError
from recalld.paths import UnsafeRuntimeDirectory, check_socket_dir, check_socket_file, client_socket
from recalld.wire.backup import BackupError, Manifest

T = TypeVar("T")

log = logging.getLogger("recalld.client")


class ClientError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        super().__init__(f"{status} {error.get('code', 'error')}: {error.get('message', body)}")
        self.status = status
        self.body = body
        self.code: str | None = error.get("code") if isinstance(error, dict) else None
        """The stable reason code (`error.code`), when the daemon sent one."""
        existing = body.get("existing_id") if isinstance(body, dict) else None
        self.existing_id: uuid.UUID | None = uuid.UUID(existing) if isinstance(existing, str) else None
        """On a 409 `exact_duplicate`: the record this one duplicates."""


def _queue_full(exc: BaseException) -> bool:
    """Whether a failed connect met a full listen queue: on a Unix socket the kernel then answers
    EAGAIN at once instead of making the client wait (httpx wraps it twice)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Client(Calls):
    """The sync client over the Unix socket (httpx's `uds` transport); a context manager.

    `socket_path` None: `$RECALLD_SOCKET`, else the default socket (`recalld serve`'s)."""

    CONNECT_RETRY_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8)
    """A connection refused because the daemon's queue is full (a burst of clients, the daemon
    busy for a moment) is tried again after each of these pauses, 1.55 s in all; nothing of the
    request was sent, so even a POST is safe to repeat."""

    def __init__(self, socket_path: Path | str | None = None, timeout: float = 60.0) -> None:
        self.socket_path = client_socket(str(socket_path) if socket_path else None)
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket_path)), base_url="http://recalld", timeout=timeout
        )
        self._directory_checked = False

    def _check_directory(self) -> None:
        if not self._directory_checked:
            _check_socket(self.socket_path)
            self._directory_checked = True

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None) -> Any:
        """Send any route; its JSON answer as plain data."""
        response = self._send(method, path, None if body is None else msgspec.json.encode(body), params)
        return _payload(response)

    def call(self, call: Call[T]) -> T:
        response = self._send(call.method, call.path, call.content, call.params)
        return call.answer(_checked(response).content)

    def _send(self, method: str, path: str, content: bytes | None, params: dict[str, str] | None) -> httpx.Response:
        self._check_directory()
        headers = {"Content-Type": "application/json"} if content is not None else None
        for pause in (*self.CONNECT_RETRY_DELAYS_S, None):
            try:
                return self._http.request(method, path, content=content, params=params, headers=headers)
            except httpx.ConnectError as exc:
                _not_reachable(self.socket_path, exc, pause, len(self.CONNECT_RETRY_DELAYS_S))
                time.sleep(pause or 0)
            except httpx.TransportError as exc:
                raise ConnectionError(f"recalld is not reachable at {self.socket_path}: {exc}") from exc
        raise AssertionError("unreachable: the last pause raises")

    def backup(self, directory: Path | str) -> Manifest:
        """A consistent backup of the daemon's store (`GET /admin/backup`, administrators only)
        into `directory`, new or empty: `database.dump`, then `manifest.json` (daemon/wire/backup.py);
        the manifest, its `dump` entry (size, SHA-256) filled in. A stream that breaks off, an
        answer without a manifest line and an empty dump raise BackupError (`DirectoryNotEmpty`
        when the directory is not); a refusal ClientError; then nothing is left in the
        directory, and a directory made here is removed (`recalld.client.backup`)."""
        self._check_directory()
        writer = BackupWriter(Path(directory))
        writer.prepare()
        try:
            try:
                timeout = httpx.Timeout(self._http.timeout.connect, read=READ_TIMEOUT_S)
                with self._http.stream("GET", "/admin/backup", timeout=timeout) as response:
                    if response.status_code >= 400:
                        _refused(response.status_code, response.read())
                    for chunk in response.iter_bytes():
                        writer.take(chunk)
            except httpx.TransportError as exc:
                raise _broken(self.socket_path, writer, exc) from exc
            return writer.finish()
        except BaseException:
            writer.abandon()
            raise

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()


class AsyncClient(AsyncCalls):
    """The async client (any anyio backend: asyncio or trio); an async context manager. The
    same methods as `Client`, awaited: `await recalld.recall("team", "refunds")`."""

    CONNECT_RETRY_DELAYS_S = Client.CONNECT_RETRY_DELAYS_S

    def __init__(self, socket_path: Path | str | None = None, timeout: float = 60.0) -> None:
        self.socket_path = client_socket(str(socket_path) if socket_path else None)
        self._http = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(self.socket_path)), base_url="http://recalld", timeout=timeout
        )
        self._directory_checked = False

    def _check_directory(self) -> None:
        if not self._directory_checked:
            _check_socket(self.socket_path)
            self._directory_checked = True

    async def request(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None) -> Any:
        """Send any route; its JSON answer as plain data."""
        response = await self._send(method, path, None if body is None else msgspec.json.encode(body), params)
        return _payload(response)

    async def call(self, call: Call[T]) -> T:
        response = await self._send(call.method, call.path, call.content, call.params)
        return call.answer(_checked(response).content)

    async def _send(
        self, method: str, path: str, content: bytes | None, params: dict[str, str] | None
    ) -> httpx.Response:
        self._check_directory()
        headers = {"Content-Type": "application/json"} if content is not None else None
        for pause in (*self.CONNECT_RETRY_DELAYS_S, None):
            try:
                return await self._http.request(method, path, content=content, params=params, headers=headers)
            except httpx.ConnectError as exc:
                _not_reachable(self.socket_path, exc, pause, len(self.CONNECT_RETRY_DELAYS_S))
                await anyio.sleep(pause or 0)
            except httpx.TransportError as exc:
                raise ConnectionError(f"recalld is not reachable at {self.socket_path}: {exc}") from exc
        raise AssertionError("unreachable: the last pause raises")

    async def backup(self, directory: Path | str) -> Manifest:
        """As `Client.backup`; the files are written in worker threads."""
        self._check_directory()
        writer = BackupWriter(Path(directory))
        await anyio.to_thread.run_sync(writer.prepare)
        try:
            timeout = httpx.Timeout(self._http.timeout.connect, read=READ_TIMEOUT_S)
            try:
                async with self._http.stream("GET", "/admin/backup", timeout=timeout) as response:
                    if response.status_code >= 400:
                        _refused(response.status_code, await response.aread())
                    async for chunk in response.aiter_bytes():
                        await anyio.to_thread.run_sync(writer.take, chunk)
            except httpx.TransportError as exc:
                raise _broken(self.socket_path, writer, exc) from exc
            return await anyio.to_thread.run_sync(writer.finish)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(writer.abandon)
            raise

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.aclose()


def _check_socket(socket_path: Path) -> None:
    """Before the first connection: refuse a socket directory another user could control (their
    socket would get our records). Once is enough: only its owner can change it."""
    try:
        # no socket at all: nothing to trust or distrust, and nothing to connect to
        os.lstat(socket_path)
        check_socket_dir(socket_path.parent, binding=False)
        check_socket_file(socket_path)
    except FileNotFoundError:
        # connect nowhere rather than into a directory someone might create meanwhile
        raise ConnectionError(f"recalld is not reachable at {socket_path}: no such socket") from None
    except UnsafeRuntimeDirectory as exc:
        raise ConnectionError(str(exc)) from exc


def _not_reachable(socket_path: Path, exc: httpx.ConnectError, pause: float | None, retries: int) -> None:
    """Raise ConnectionError unless the connect met a full queue and a pause is left to retry after."""
    if not _queue_full(exc):
        raise ConnectionError(f"recalld is not reachable at {socket_path}: {exc}") from exc
    if pause is None:
        raise ConnectionError(
            f"recalld is not reachable at {socket_path}: its connection queue stayed full over {retries + 1} "
            f"tries ({exc})"
        ) from exc
    log.debug("the daemon's connection queue is full (EAGAIN); retrying in %.2f s", pause)


def _payload(response: httpx.Response) -> Any:
    try:
        payload = response.json()
    except ValueError:
        payload = response.text
    if response.status_code >= 400:
        raise ClientError(response.status_code, payload)
    return payload


def _refused(status: int, body: bytes) -> NoReturn:
    try:
        payload = msgspec.json.decode(body)
    except msgspec.DecodeError:
        payload = body.decode(errors="replace")
    raise ClientError(status, payload)


def _broken(socket_path: Path, writer: BackupWriter, exc: httpx.TransportError) -> Exception:
    """What a transport failure during a backup means: no daemon, or a dump that broke off."""
    if isinstance(exc, httpx.ConnectError):
        return ConnectionError(f"recalld is not reachable at {socket_path}: {exc}")
    return BackupError(f"the dump broke off after {writer.size} bytes: {exc}")


def _checked(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        _payload(response)  # raises ClientError with the body
    return response
