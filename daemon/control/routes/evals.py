"""The eval history routes (docs/EVAL.md): `POST /v1/evals` records a `recalld eval` run,
`GET /v1/evals` lists the latest. The eval itself is a client of the socket like any other; the
daemon only keeps what it measured, so that runs before and after a model or template switch can
be compared.

Access: recording a run needs write access to the namespace it ran in (its own, which the
caller wrote the corpus into); the history lists the runs whose namespace the caller may read,
all of them for an administrator.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any, Literal

import msgspec
from aiohttp import web
from msgspec import Meta

from recalld.control.context import SERVICES, ok, peer, read_body
from recalld.control.decoding import check_text, decode
from recalld.store.evals import EvalStore
from recalld.wire.errors import ApiError, ErrorCode, bad_value

NAME_MAX_CHARS = 200
SOURCE_MAX_CHARS = 2000
MAX_KINDS = 100
HISTORY_MAX = 1000
HISTORY_DEFAULT = 20

Count = Annotated[int, Meta(ge=0, le=10_000_000)]
Share = Annotated[float, Meta(ge=0, le=1)]


class _In(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class Figures(_In):
    """One route's figures over one kind of question (actors/recall/metrics.py)."""

    hit_at_5: Count
    of: Count
    mrr_at_10: Share
    recall_at_10: Share
    ndcg_at_10: Share


class SpaceIn(_In):
    provider: str
    model: str
    dimension: Annotated[int, Meta(ge=1, le=100_000)]
    template_version: Annotated[int, Meta(ge=0, le=1_000_000)]


class EvalRunIn(_In):
    golden: str
    source: str
    namespace: str
    space: SpaceIn
    space_id: str
    questions: Annotated[int, Meta(ge=1, le=10_000_000)]
    routes: dict[Literal["fts", "vector", "fused"], dict[str, Figures]]
    started_at: dt.datetime
    duration_s: Annotated[float, Meta(ge=0, le=10_000_000)]
    count: Count | None = None
    of: Count | None = None
    floor: Count | None = None
    verdict: Literal["at_or_above_floor", "below_floor", "no_floor"] | None = None
    degraded: Count = 0


class EvalRecorded(msgspec.Struct, kw_only=True):
    """`POST /v1/evals`: the run kept."""

    id: uuid.UUID


class EvalRun(EvalRunIn, kw_only=True):
    """A run kept: what was recorded, its id and when it was recorded."""

    id: uuid.UUID
    recorded_at: dt.datetime


class EvalHistory(msgspec.Struct, kw_only=True):
    """`GET /v1/evals`: the latest runs the caller may read, newest first."""

    runs: list[EvalRun]


def _store(request: web.Request) -> EvalStore:
    store = request.app[SERVICES].evals
    if store is None:  # only a daemon assembled without one (tests of other parts)
        raise ApiError(503, ErrorCode.ROUTE_UNAVAILABLE, "this daemon keeps no eval history")
    return store


def _check(run: EvalRunIn, max_namespace_chars: int) -> None:
    """What decoding cannot say: text the store can hold, counts that are counts of the set."""
    check_text("golden", run.golden, max_chars=NAME_MAX_CHARS)
    check_text("source", run.source, max_chars=SOURCE_MAX_CHARS)
    check_text("namespace", run.namespace, max_chars=max_namespace_chars)
    check_text("space_id", run.space_id, max_chars=NAME_MAX_CHARS)
    check_text("space.provider", run.space.provider, max_chars=NAME_MAX_CHARS)
    check_text("space.model", run.space.model, max_chars=NAME_MAX_CHARS)
    if run.started_at.tzinfo is None:
        raise bad_value("started_at needs a time zone (e.g. ...Z or +00:00)")
    if (run.count is None) != (run.of is None):
        raise bad_value("count and of come together: the fused hit@5 count and the questions it is of")
    if run.count is not None and run.of is not None and not (run.count <= run.of == run.questions):
        raise bad_value(f"count {run.count} of {run.of} is not a count of the {run.questions} questions")
    if not run.routes:
        raise bad_value("routes must hold the figures of at least one route")
    for route, kinds in run.routes.items():
        if not kinds or len(kinds) > MAX_KINDS:
            raise bad_value(f"routes.{route} must hold the figures of 1 to {MAX_KINDS} kinds")
        for kind, figures in kinds.items():
            check_text(f"routes.{route} kind", kind, max_chars=NAME_MAX_CHARS)
            if figures.hit_at_5 > figures.of or figures.of > run.questions:
                raise bad_value(f"routes.{route}.{kind}: hit_at_5 {figures.hit_at_5} of {figures.of} is not a count")


async def record(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    run = decode(await read_body(request), EvalRunIn)
    _check(run, services.config.records.max_namespace_chars)
    services.access.require_write(peer(request), run.namespace)
    fields: dict[str, Any] = msgspec.to_builtins(run)
    fields["started_at"] = run.started_at
    run_id = await _store(request).record(fields)
    return ok(EvalRecorded(id=run_id), 201)


async def history(request: web.Request) -> web.Response:
    """`?golden=` (one set's runs) and `?limit=` (default 20, at most 1000), newest first."""
    services = request.app[SERVICES]
    golden = request.query.get("golden") or None
    if golden is not None:
        check_text("golden", golden, max_chars=NAME_MAX_CHARS)
    try:
        limit = int(request.query.get("limit", str(HISTORY_DEFAULT)))
    except ValueError:
        raise bad_value("limit must be an integer") from None
    if not 1 <= limit <= HISTORY_MAX:
        raise bad_value(f"limit must be between 1 and {HISTORY_MAX}")
    caller = peer(request)
    runs = msgspec.convert(await _store(request).runs(golden=golden, limit=limit), list[EvalRun])
    if not services.access.is_admin(caller):
        runs = [r for r in runs if services.access.may_read(caller, r.namespace)]
    return ok(EvalHistory(runs=runs))


def install(app: web.Application) -> None:
    app.router.add_post("/v1/evals", record)
    app.router.add_get("/v1/evals", history)
