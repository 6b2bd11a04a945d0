"""The JSON client of the control socket, shared by the CLI, `recalld ingest` and the benches.

A refusal by the daemon (any 4xx or 5xx) raises `ClientError` with its `{"error": ...}` body;
no answer at all (nobody listening, a queue that stays full, a socket directory another user
could control) raises `ConnectionError`.
"""

from __future__ import annotations

import errno
import logging
import time
from pathlib import Path
from typing import Any

import httpx

from daemon import paths

log = logging.getLogger("recalld.client")


class ClientError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        super().__init__(f"{status} {error.get('code', 'error')}: {error.get('message', body)}")
        self.status = status
        self.body = body


def _queue_full(exc: BaseException) -> bool:
    """Whether a failed connect met a full listen queue: on a Unix socket the kernel then answers
    EAGAIN at once instead of making the client wait (httpx wraps it twice)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class Client:
    """A thin JSON client over the Unix socket (httpx's `uds` transport)."""

    CONNECT_RETRY_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8)
    """A connection refused because the daemon's queue is full (a burst of clients, the daemon
    busy for a moment) is tried again after each of these pauses, 1.55 s in all; nothing of the
    request was sent, so even a POST is safe to repeat."""

    def __init__(self, socket_path: Path, timeout: float = 60.0) -> None:
        self.socket_path = socket_path
        self._http = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(socket_path)), base_url="http://recalld", timeout=timeout
        )
        self._directory_checked = False

    def _check_directory(self) -> None:
        """Before the first connection: refuse a socket directory another user could control
        (their socket would get our records). Once is enough: only its owner can change it."""
        if self._directory_checked:
            return
        try:
            paths.check_socket_dir(self.socket_path.parent, binding=False)
            paths.check_socket_file(self.socket_path)
        except FileNotFoundError:
            # connect nowhere rather than into a directory someone might create meanwhile
            raise ConnectionError(f"recalld is not reachable at {self.socket_path}: no such socket") from None
        except paths.UnsafeRuntimeDirectory as exc:
            raise ConnectionError(str(exc)) from exc
        self._directory_checked = True

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None) -> Any:
        self._check_directory()
        for pause in (*self.CONNECT_RETRY_DELAYS_S, None):
            try:
                response = self._http.request(method, path, json=body, params=params)
                break
            except httpx.ConnectError as exc:
                if not _queue_full(exc):
                    raise ConnectionError(f"recalld is not reachable at {self.socket_path}: {exc}") from exc
                if pause is None:
                    tries = len(self.CONNECT_RETRY_DELAYS_S) + 1
                    raise ConnectionError(
                        f"recalld is not reachable at {self.socket_path}: its connection queue stayed full "
                        f"over {tries} tries ({exc})"
                    ) from exc
                log.debug("the daemon's connection queue is full (EAGAIN); retrying in %.2f s", pause)
                time.sleep(pause)
            except httpx.TransportError as exc:
                raise ConnectionError(f"recalld is not reachable at {self.socket_path}: {exc}") from exc
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        if response.status_code >= 400:
            raise ClientError(response.status_code, payload)
        return payload

    def close(self) -> None:
        self._http.close()
