"""What the control server and its routes share: the services a handler reaches, the caller of
a request, and how an error goes out on the wire.

Its own module so that `server` (the app, its middlewares, its sockets) and `routes` (the
handlers) both import it and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from actors.embedder import Embedder
from actors.index_manager import IndexManager
from daemon.canonical import Canonical
from daemon.config import Config
from daemon.control.access import AccessPolicy, Peer
from daemon.control.decoding import encode
from daemon.control.errors import ApiError
from daemon.control.health import Health
from daemon.duplicates import DuplicateChecker
from daemon.indexing_status import IndexingStatus
from daemon.metrics import Metrics
from daemon.recall import RecallService
from daemon.store.evals import EvalStore
from daemon.store.records import RecordRepository
from daemon.store.search import FeedbackStore
from daemon.store.usage import UsageStore


@dataclass
class Services:
    """Everything a handler may reach; built once by daemon.app."""

    config: Config
    metrics: Metrics
    health: Health
    access: AccessPolicy
    records: RecordRepository
    usage: UsageStore
    feedback: FeedbackStore
    embedder: Embedder | None
    index: IndexManager | None
    recall: RecallService
    alive: Callable[[], bool]
    capabilities: Callable[[], Awaitable[dict[str, bool]]]
    dsn: str = ""
    """The store's address: `GET /admin/backup` runs pg_dump against it (daemon/control/backup.py)."""
    duplicates: DuplicateChecker | None = None
    """The semantic duplicate check (daemon/duplicates.py)."""
    evals: EvalStore | None = None
    """The history of `recalld eval` runs (daemon/control/evals.py)."""
    canonical: Canonical | None = None
    """Observations, assignments, disputes and the resolver (daemon/canonical.py)."""
    indexing: IndexingStatus | None = None
    """How far the vector route is behind, per namespace (None: no vector route); told of
    every write."""


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
