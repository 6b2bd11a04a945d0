"""The routes of records, recall, health and generations. Each decodes and checks the input and
the caller's rights, calls a service or an actor, and encodes the answer (docs/API.md)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import anyio
import msgspec
from aiohttp import web

from recalld.actors.index.builds import GenerationNotFound, PointerMoved, SpaceMismatch
from recalld.actors.index.manager import IndexManager
from recalld.actors.index.manifest import GenerationCorrupt, is_valid_generation_id
from recalld.actors.ports.index import GenerationRow
from recalld.actors.recall.policy import NothingAnswered
from recalld.config import Config
from recalld.control.access import Peer
from recalld.control.context import SERVICES, Services, ok, peer, read_body
from recalld.control.decoding import SOURCE_PATH_MAX_BYTES, check_recall, check_record, check_text, decode
from recalld.control.errors import route_unavailable
from recalld.metrics import CONTENT_TYPE
from recalld.store.db import FLUSH_WAIT_S
from recalld.store.records import NamespaceChange
from recalld.wire.errors import ApiError, ErrorCode, bad_value, not_found
from recalld.wire.index import Build, BuildStarted, Generation, GenerationActivated, Generations, Lag, Serving
from recalld.wire.recall import Feedback, FeedbackRecorded, RecallRequest
from recalld.wire.records import RecordForgotten, RecordIn, RecordOut, RecordPage, RecordUpdate
from recalld.wire.service import Capabilities, Capability, Limits, Liveness


def _namespace_param(request: web.Request, config: Config) -> str | None:
    """`?namespace=`, checked as the same field of a JSON body is (no NUL, bounded); None when absent."""
    namespace = request.query.get("namespace", "")
    if not namespace:
        return None
    check_text("namespace", namespace, max_chars=config.records.max_namespace_chars)
    return namespace


def _required_namespace(request: web.Request, config: Config) -> str:
    namespace = _namespace_param(request, config)
    if namespace is None:
        raise bad_value("the namespace query parameter is required")
    return namespace


def _record_id(request: web.Request) -> uuid.UUID:
    raw = request.match_info["id"]
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ApiError(400, ErrorCode.INVALID_ID, f"{raw[:60]!r} is not a UUID") from None


def _out(row: Any) -> RecordOut:
    return RecordOut(**{name: row[name] for name in RecordOut.__struct_fields__})


# -- health


async def livez(request: web.Request) -> web.Response:
    alive = request.app[SERVICES].alive()
    return ok(Liveness(status="pass" if alive else "fail"), 200 if alive else 503)


async def readyz(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    verdict = await services.health.readiness()
    services.metrics.ready.set(1 if verdict.status != "fail" else 0)
    return ok(verdict, 503 if verdict.status == "fail" else 200)


async def metrics(request: web.Request) -> web.Response:
    body = request.app[SERVICES].metrics.render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def capabilities(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    available = await services.capabilities()
    records, recall = services.config.records, services.config.recall
    limits = Limits(
        max_title_chars=records.max_title_chars,
        max_body_chars=records.max_body_chars,
        max_batch=records.max_batch,
        max_k=recall.max_k,
        max_query_chars=recall.max_query_chars,
    )
    offered = [Capability(name=name, available=up) for name, up in available.items()]
    return ok(Capabilities(capabilities=offered, limits=limits))


# -- records


async def create_record(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    record = decode(await read_body(request), RecordIn)
    check_record(record, services.config)
    services.access.require_write(peer(request), record.namespace)
    return ok(await services.writes.create(record), 201)


async def get_record(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    row = await services.records.get(_record_id(request))
    if row is None:
        raise not_found("record")
    services.access.require_visible(peer(request), row["namespace"], "record")
    return ok(_out(row))


async def update_record(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    record_id = _record_id(request)
    update = decode(await read_body(request), RecordUpdate)
    caller = peer(request)
    check_record(update, services.config)
    # The namespace the body names is checked first: its refusal is the same whatever the id.
    services.access.require_write(caller, update.namespace)
    try:
        return ok(await services.writes.revise(record_id, update))
    except NamespaceChange as exc:
        raise namespace_change(services, caller, exc) from None


def namespace_change(services: Services, caller: Peer, exc: NamespaceChange) -> ApiError:
    """A revision naming another namespace than the record's: the record's own is named only to
    a caller who may see it (404 otherwise, as for an id that does not exist)."""
    services.access.require_visible(caller, exc.args[0], "record")
    return bad_value(f"namespace cannot change (the record lives in {exc.args[0]!r}); forget and create")


async def forget_record(request: web.Request) -> web.Response:
    """`?namespace=` (optional): forget the record only if it lives there. A record of another
    namespace is then not found, the same answer as an id that does not exist, so a client
    scoped to one namespace (`recalld mcp -n`) can neither touch nor probe another's."""
    services = request.app[SERVICES]
    record_id = _record_id(request)
    scope = _namespace_param(request, services.config)
    row = await services.records.get(record_id)
    if row is None or (scope is not None and row["namespace"] != scope):
        raise not_found("record")
    caller = peer(request)
    services.access.require_visible(caller, row["namespace"], "record")
    services.access.require_write(caller, row["namespace"])  # a record it may see: a 403 tells nothing new
    if not await services.writes.forget(record_id):
        raise not_found("record")
    return ok(RecordForgotten(id=record_id, deleted=True))


async def list_records(request: web.Request) -> web.Response:
    """`?namespace=` (required), optional `source_path=`, `limit=` (<= 1000) and `after=` (an id)."""
    services = request.app[SERVICES]
    query = request.query
    namespace = _required_namespace(request, services.config)
    services.access.require_read(peer(request), namespace)
    if "source_path" in query:
        check_text("source_path", query["source_path"], max_chars=SOURCE_PATH_MAX_BYTES)
        rows = await services.records.by_source(namespace, query["source_path"])
        return ok(RecordPage(records=[_out(r) for r in rows], next=None))
    try:
        limit = int(query.get("limit", "100"))
        after = uuid.UUID(query["after"]) if query.get("after") else None
    except ValueError:
        raise bad_value("limit must be an integer and after a UUID") from None
    if not 1 <= limit <= 1000:
        raise bad_value("limit must be between 1 and 1000")
    rows = await services.records.list(namespace, limit=limit, after=after)
    following = rows[-1]["id"] if len(rows) == limit else None
    return ok(RecordPage(records=[_out(r) for r in rows], next=following))


# -- recall


async def recall(request: web.Request) -> web.Response:
    services = request.app[SERVICES]
    query = decode(await read_body(request), RecallRequest)
    check_recall(query, services.config)
    services.access.require_read(peer(request), query.namespace)
    try:
        answer = await services.recall.recall(query)
    except NothingAnswered as refusal:
        raise route_unavailable(refusal) from None
    return ok(answer)


async def feedback(request: web.Request) -> web.Response:
    """`{search_id, id, useful}`: a judgement on one result of an earlier recall."""
    services = request.app[SERVICES]
    judgement = decode(await read_body(request), Feedback)
    namespace = await services.feedback.search_namespace(judgement.search_id)
    if namespace is None:
        raise not_found(f"search {judgement.search_id}")
    services.access.require_visible(peer(request), namespace, f"search {judgement.search_id}")
    rank = await services.feedback.record(judgement.search_id, judgement.id, judgement.useful)
    if rank is None:
        raise bad_value(f"record {judgement.id} was not among the results of search {judgement.search_id}")
    return ok(FeedbackRecorded(search_id=judgement.search_id, id=judgement.id, rank=rank, useful=judgement.useful))


async def stats(request: web.Request) -> web.Response:
    """`?namespace=` (required: statistics are per namespace only) and `?k=` (default 10)."""
    services = request.app[SERVICES]
    namespace = _required_namespace(request, services.config)
    services.access.require_read(peer(request), namespace)
    try:
        k = int(request.query.get("k", "10"))
    except ValueError:
        raise bad_value("k must be an integer") from None
    if not 1 <= k <= services.config.recall.max_k:
        raise bad_value(f"k must be between 1 and {services.config.recall.max_k}")
    return ok(await services.feedback.stats(namespace, k))


async def usage(request: web.Request) -> web.Response:
    """`?namespace=` (admins may omit it: all namespaces) and `?since=` (RFC 3339)."""
    services = request.app[SERVICES]
    namespace = _namespace_param(request, services.config)
    caller = peer(request)
    if namespace is None:
        services.access.require_admin(caller)
    else:
        services.access.require_read(caller, namespace)
    since = None
    if request.query.get("since"):
        try:
            since = dt.datetime.fromisoformat(request.query["since"])
        except ValueError:
            raise bad_value("since must be an RFC 3339 timestamp") from None
        if since.tzinfo is None:
            raise bad_value("since needs a time zone (e.g. ...Z or +00:00)")
        try:
            since = since.astimezone(dt.UTC)
        except OverflowError:
            raise bad_value("since is outside the years 1 to 9999 once in UTC") from None
    if services.embedder is not None:
        with anyio.move_on_after(FLUSH_WAIT_S):  # usage rows gather before they are written
            await services.embedder.flush_usage()
    if services.duplicates is not None:  # the title model's embedder gathers its own
        with anyio.move_on_after(FLUSH_WAIT_S):
            await services.duplicates.flush_usage()
    return ok(await services.usage.summary(namespace=namespace, since=since))


# -- generations


def _index(request: web.Request) -> IndexManager:
    index = request.app[SERVICES].index
    if index is None:
        raise ApiError(
            503, ErrorCode.ROUTE_UNAVAILABLE, "no embedding provider is configured, so there is no vector index"
        )
    return index


def _generation(row: GenerationRow, spaces: dict[str, object], current: str | None, admin: bool) -> Generation:
    space = msgspec.convert(spaces.get(row.space_id), dict[str, Any] | None)
    whole = Generation(**msgspec.structs.asdict(row), space=space, current=row.id == current)
    return whole.seen_by(admin=admin)


async def generations(request: web.Request) -> web.Response:
    """`current`, `generations` and `pending` for every caller, and which generation this daemon
    serves and how far it lags (`serving`, `lag`); administrators get each row whole, the builds'
    errors and the index manager's `index` snapshot too (`daemon/wire/index.py`: who sees what).

    A caller who may read only some namespaces gets counts over those alone: the current
    generation's `count` and `pending` (how much another namespace holds is not theirs to
    know), no other generation and no build's progress, whose counts span every namespace.

    `?namespace=` narrows `pending` to that namespace (the caller must be allowed to read it),
    so that a client waiting for its own upload to be indexed is not held by another's, and
    adds `pending_chunks`: that namespace's chunks still to embed, which a progress bar counts
    (`IndexManager.count_pending_chunks`)."""
    index = _index(request)
    store = index.store
    services = request.app[SERVICES]
    access, caller = services.access, peer(request)
    namespace = _namespace_param(request, services.config)
    if namespace is not None:
        access.require_read(caller, namespace)
    pointer = await store.pointer()
    spaces = await store.spaces()
    current_id = pointer.current.id if pointer.current else None
    admin = access.is_admin(caller)
    readable = access.readable_namespaces(caller)
    rows = [_generation(r, spaces, current_id, admin) for r in await store.generations()]
    if readable is not None:
        rows = [msgspec.structs.replace(r, count=index.generation_count(r.id, readable)) for r in rows if r.current]
    builds = [
        Build(**msgspec.structs.asdict(b)).seen_by(admin=admin, whole_reader=readable is None) for b in index.builds()
    ]
    # Which generation this daemon serves and how far it lags behind PostgreSQL: in a fleet each
    # member serves a copy of its own (`IndexManager.serving`). The vectors behind span every
    # namespace: only a caller who may read them all is told how many.
    served = index.serving()
    vectors_behind = await index.vectors_behind() if readable is None else None
    answer = Generations(
        current=next((r for r in rows if r.current), None),
        previous=pointer.previous,
        generations=rows,
        pending=await index.count_pending(readable if namespace is None else [namespace]),
        builds=builds,
        serving=msgspec.convert(served["serving"], Serving),
        lag=msgspec.convert(served["lag"] | {"vectors": vectors_behind}, Lag),
    )
    if namespace is not None:
        answer.pending_chunks = await index.count_pending_chunks([namespace])
    if admin:
        answer.index = index.snapshot()
    return ok(answer)


async def rebuild(request: web.Request) -> web.Response:
    request.app[SERVICES].access.require_admin(peer(request))
    status = _index(request).request_rebuild()
    return ok(BuildStarted(build_id=status.id, state=status.state), 202)


async def activate(request: web.Request) -> web.Response:
    request.app[SERVICES].access.require_admin(peer(request))
    index = _index(request)
    generation_id = request.match_info["id"]
    if not is_valid_generation_id(generation_id):
        raise not_found(f"generation {generation_id[:80]!r}")
    try:
        row = await index.activate(generation_id)
    except GenerationNotFound as exc:
        raise not_found(f"generation {generation_id!r}") from exc
    except GenerationCorrupt as exc:
        raise ApiError(409, ErrorCode.VECTOR_INDEX_CORRUPT, str(exc)) from None
    except SpaceMismatch as exc:
        raise ApiError(409, ErrorCode.SPACE_MISMATCH, str(exc)) from None
    except PointerMoved as exc:
        raise ApiError(409, ErrorCode.CONFLICT, str(exc)) from None
    return ok(GenerationActivated(id=row.id, current=True))


def install(app: web.Application) -> None:
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/capabilities", capabilities)
    app.router.add_post("/v1/records", create_record)
    app.router.add_get("/v1/records", list_records)
    app.router.add_get("/v1/records/{id}", get_record)
    app.router.add_put("/v1/records/{id}", update_record)
    app.router.add_delete("/v1/records/{id}", forget_record)
    app.router.add_post("/v1/recall", recall)
    app.router.add_post("/v1/recall/feedback", feedback)
    app.router.add_get("/v1/stats", stats)
    app.router.add_get("/v1/usage", usage)
    app.router.add_get("/v1/generations", generations)
    app.router.add_post("/admin/generations/rebuild", rebuild)
    app.router.add_post("/admin/generations/{id}/activate", activate)
