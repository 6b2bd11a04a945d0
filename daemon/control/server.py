"""The control server: an aiohttp app on a Unix socket, run as a supervised actor.

Handlers are thin: decode and check the wire type, check access, call a service, encode. Every
failure leaves through `_errors`, which turns it into `{"error": {"code", "message"}}` with a
4xx for anything the client did and 503 for a store outage (PostgreSQL unreachable, or no server
accepting writes, as during a failover); a 500 means a bug of ours.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
from aiohttp import web

from recalld import paths
from recalld.control.access import peer_of
from recalld.control.context import PEER, SERVICES, Services, error_response
from recalld.control.errors import not_indexable
from recalld.control.limits import over_limit
from recalld.control.routes import assignments, backup, duplicates, evals, records, records_batch, roles
from recalld.log import rejected_requests_logged
from recalld.store.db import STORE_DOWN_ERRORS, STORE_LIMIT_ERRORS, outage_message
from recalld.wire.errors import ApiError, ErrorCode

log = logging.getLogger("recalld.control")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTTP_CODES = {
    404: ErrorCode.UNKNOWN_ROUTE,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
}


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    services = request.app[SERVICES]
    try:
        response = await handler(request)
    except ApiError as exc:
        response = error_response(exc)
    except web.HTTPRequestEntityTooLarge:
        limit, size = services.config.server.max_body_bytes, request.content_length  # None: chunked
        refusal = over_limit("bytes in the request body", size, "server.max_body_bytes", limit, status=413)
        response = error_response(refusal)
    except web.HTTPException as exc:
        code = _HTTP_CODES.get(exc.status, ErrorCode.INVALID_REQUEST)
        status = exc.status if exc.status >= 400 else 400
        response = error_response(ApiError(status, code, exc.reason or exc.text or "request refused"))
    except STORE_DOWN_ERRORS as exc:
        log.warning(
            "store unavailable during %s %s: %s", request.method, request.path, type(exc).__name__, exc_info=exc
        )
        response = error_response(ApiError(503, ErrorCode.STORE_UNAVAILABLE, outage_message(exc)))
    except STORE_LIMIT_ERRORS as exc:
        response = error_response(not_indexable(exc))
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        response = error_response(ApiError(500, ErrorCode.INTERNAL_ERROR, "internal error; see the daemon log"))
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    services.metrics.http_requests.labels(route=route, status=str(response.status)).inc()
    return response


@web.middleware
async def _credentials(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Identify the peer once per request; refuse peers that have no rights at all."""
    services = request.app[SERVICES]
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    caller = peer_of(sock)
    request[PEER] = caller
    if caller.uid is not None and not services.access.may_connect(caller):
        raise ApiError(403, ErrorCode.FORBIDDEN, f"uid {caller.uid} has no access to this daemon")
    return await handler(request)


def make_app(services: Services) -> web.Application:
    app = web.Application(middlewares=[_errors, _credentials], client_max_size=services.config.server.max_body_bytes)
    app[SERVICES] = services
    records.install(app)
    records_batch.install(app)
    duplicates.install(app)
    evals.install(app)
    backup.install(app)
    assignments.install(app)
    roles.install(app)
    return app


# -- sockets


class SocketInUse(RuntimeError):
    """Another live process answers on the configured socket path."""


def bind_unix_socket(path: Path, mode: int) -> socket.socket:
    """Bind a listening Unix socket at `path` with `mode`, replacing only a stale socket file.

    A path that is not a socket is never removed (it may be someone's file); a socket that
    still accepts connections belongs to a live daemon, so we refuse instead of stealing it.
    Nor do we listen in a directory where another user could swap our socket for theirs
    (`paths.UnsafeRuntimeDirectory`).
    """
    paths.make_socket_dir(path.parent, mode)
    try:
        st = path.lstat()
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise SocketInUse(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: nobody listens any more
        else:
            raise SocketInUse(f"another process is listening on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # the umask closes the window between bind() and chmod() in which the file would be open to all
    previous = os.umask(0o777 & ~mode)
    try:
        sock.bind(str(path))
    finally:
        os.umask(previous)
    os.chmod(path, mode)
    # nobody accepts until the control server runs (after PostgreSQL and the model are up), and
    # it then applies [server] backlog: until then queue as many clients as the kernel allows
    sock.listen(somaxconn() or socket.SOMAXCONN)
    sock.setblocking(False)
    return sock


SOMAXCONN_PATH = Path("/proc/sys/net/core/somaxconn")


def somaxconn() -> int | None:
    """The kernel's cap on any socket's listen backlog (Linux), or None where it cannot be read."""
    try:
        return int(SOMAXCONN_PATH.read_text())
    except (OSError, ValueError):
        return None


def listen_backlog(configured: int) -> int:
    """`[server] backlog` as the kernel will apply it: listen() clips silently to somaxconn, so
    say so, or an operator would count on a queue the kernel does not give."""
    limit = somaxconn()
    if limit is None or configured <= limit:
        return configured
    log.warning(
        "[server] backlog %d is over the kernel's net.core.somaxconn; using %d (raise it with sysctl)",
        configured,
        limit,
        extra={"configured": configured, "somaxconn": limit},
    )
    return limit


@dataclass
class Listener:
    """A listening socket bound once at start (so a bad path fails the start, not an actor),
    reopened by each run of the control server as a duplicate, closed at exit.

    Kinds: a Unix socket path we bound, an inherited (socket-activated) fd, or a TCP address
    (health and metrics only: TCP peers carry no credentials, hence no rights).
    """

    sock: socket.socket
    description: str
    path: Path | None = None
    """Set when we bound the path ourselves and so remove it on the way out."""

    @classmethod
    def unix(cls, path: Path, mode: int) -> Listener:
        return cls(bind_unix_socket(path, mode), str(path), path)

    @classmethod
    def inherited(cls, fd: int) -> Listener:
        return cls(socket.socket(fileno=fd), f"fd {fd} (socket activation)")

    @classmethod
    def tcp(cls, host: str, port: int) -> Listener:
        return cls(socket.create_server((host, port)), f"tcp {host}:{port}")

    def open(self) -> socket.socket:
        # aiohttp closes the socket it served on; a duplicate keeps ours for the next restart
        sock = socket.socket(fileno=os.dup(self.sock.fileno()))
        sock.setblocking(False)
        return sock

    def close(self) -> None:
        self.sock.close()
        if self.path is not None:
            try:
                if stat.S_ISSOCK(self.path.lstat().st_mode):
                    self.path.unlink()
            except FileNotFoundError:
                pass


async def run_control_server(
    services: Services,
    listeners: list[Listener],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; on cancel stop accepting and give in-flight requests the grace."""
    grace = services.config.server.shutdown_grace_s
    backlog = listen_backlog(services.config.server.backlog)
    runner = web.AppRunner(
        make_app(services),
        handle_signals=False,
        access_log=None,
        shutdown_timeout=grace,
        # aiohttp's own default is an hour; it also covers a connection that never sends a request
        keepalive_timeout=services.config.server.idle_timeout_s,
    )
    await runner.setup()
    # aiohttp's own report of a request it cannot parse quotes its bytes: any peer could flood the log
    with rejected_requests_logged(services.config.server.rejected_log_per_s, asyncio.get_running_loop().call_later):
        try:
            for listener in listeners:
                # the site listen()s again (aiohttp's own default is 128), inherited sockets too
                await web.SockSite(runner, listener.open(), backlog=backlog).start()
            log.info("control server listening on %s", ", ".join(x.description for x in listeners))
            task_status.started()
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(grace + 1):
                await runner.cleanup()
