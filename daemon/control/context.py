"""What the control server and its routes share: the services a handler reaches, the caller of
a request, and how an error goes out on the wire.

Its own module so that `server` (the app, its middlewares, its sockets) and `routes` (the
handlers) both import it and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
from aiohttp import web

from recalld.actors.embedding.embedder import Embedder
from recalld.actors.index.manager import IndexManager
from recalld.config import Config
from recalld.control.access import AccessPolicy, Peer
from recalld.control.decoding import encode
from recalld.control.health import Health
from recalld.metrics import Metrics
from recalld.services.assignments import AssignmentService
from recalld.services.duplicates import DuplicateChecker
from recalld.services.recall import RecallService
from recalld.services.recall_indexing import IndexingStatus
from recalld.services.records import RecordWrites
from recalld.store.evals import EvalStore
from recalld.store.records import RecordRepository
from recalld.store.roles import RoleHolders
from recalld.store.search import FeedbackStore
from recalld.store.usage import UsageStore
from recalld.wire.errors import ApiError, ErrorCode


@dataclass
class Services:
    """Everything a handler may reach; built once by `recalld.assembly.assemble`."""

    config: Config
    metrics: Metrics
    health: Health
    access: AccessPolicy
    records: RecordRepository
    writes: RecordWrites
    """Record writes and the duplicate checks of their titles (daemon/services/records.py)."""
    usage: UsageStore
    feedback: FeedbackStore
    embedder: Embedder | None
    index: IndexManager | None
    recall: RecallService
    alive: Callable[[], bool]
    capabilities: Callable[[], Awaitable[dict[str, bool]]]
    dsn: str = ""
    """The store's address: `GET /admin/backup` runs pg_dump against it (daemon/control/routes/backup.py)."""
    duplicates: DuplicateChecker | None = None
    """The semantic duplicate check (daemon/services/duplicates.py)."""
    evals: EvalStore | None = None
    """The history of `recalld eval` runs (daemon/control/routes/evals.py)."""
    assignments: AssignmentService | None = None
    """Observations, assignments, disputes and the resolver (daemon/services/assignments.py)."""
    indexing: IndexingStatus | None = None
    """How far the vector route is behind, per namespace (None: no vector route); told of
    every write."""
    roles: RoleHolders | None = None
    """Who holds each role of a fleet now (daemon/store/roles.py)."""


SERVICES = web.AppKey("services", Services)
PEER = "recalld.peer"
"""The request key under which the server's credentials middleware leaves the caller's `Peer`."""


def peer(request: web.Request) -> Peer:
    found = request.get(PEER)
    return found if isinstance(found, Peer) else Peer(None, None, None)


def error_response(error: ApiError) -> web.Response:
    response = web.Response(body=encode(error.body()), status=error.status, content_type="application/json")
    if error.status == 408:
        response.force_close()  # the rest of the body may still come: the connection cannot be reused
    return response


async def read_body(request: web.Request) -> bytes:
    """The request body. One the client broke off, or sent in an encoding that does not decode
    (`Content-Encoding: gzip` over bytes that are not gzip), is the client's fault: a 400. One
    that stalls is a 408 after `[server] body_timeout_s`, so a stuck client does not hold its
    handler (and, behind it, nothing else) for good."""
    limit = request.app[SERVICES].config.server.body_timeout_s
    try:
        if request.content.is_eof():  # all here already (most requests): nothing to bound, no cancel scope
            return await request.read()
        with anyio.fail_after(limit):
            return await request.read()
    except TimeoutError:
        raise ApiError(408, ErrorCode.BODY_TIMEOUT, f"the request body did not arrive within {limit:g}s") from None
    except (web.RequestPayloadError, ConnectionResetError) as exc:
        raise ApiError(400, ErrorCode.INVALID_REQUEST, f"the request body could not be read: {exc}") from None


def ok(value: Any, status: int = 200) -> web.Response:
    return web.Response(body=encode(value), status=status, content_type="application/json")
