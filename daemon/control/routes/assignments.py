"""Routes of canonical assignments and the dispute queue (docs/DESIGN.md, "Canonical assignments").

Observations and assignments are one catalogue shared by all namespaces; access to them is
granted as to a namespace named `assignments` (`[access] writers = {"@etl" = ["assignments"]}`).
Everything under /admin needs administrator rights: a 403 for anyone else, before the request is
read.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from typing import Any

import msgspec
from aiohttp import web

from recalld.actors.assignments.disputes import FINISHED, DisputeState, Event, Tier, transition
from recalld.actors.assignments.resolver import ResolverBusy, ResolverStopped
from recalld.actors.assignments.strategy import Source
from recalld.actors.kernel.breaker import CircuitOpen
from recalld.actors.ports.assignments import DisputeConflict, Outcome
from recalld.control.context import SERVICES, ok, peer, read_body
from recalld.control.decoding import check_text, decode
from recalld.services.assignments import AssignmentService
from recalld.store.assignments import Observation
from recalld.wire.assignments import (
    MAX_OBSERVATIONS,
    DecisionIn,
    Dispute,
    DisputePage,
    ForceIn,
    ManualAssignment,
    ManualIn,
    ManualRemoved,
    ObservationIn,
    ObservationsIn,
    Observed,
)
from recalld.wire.errors import ApiError, ErrorCode, bad_value, not_found

SCOPE = "assignments"
"""The namespace name access to observations and assignments is configured under."""
NAME_CHARS, NAME_BYTES = 200, 800  # three names share one btree entry of at most 2,704 bytes
VALUE_CHARS = 4000


def _assignments(request: web.Request) -> AssignmentService:
    found = request.app[SERVICES].assignments
    if found is None:
        raise ApiError(503, ErrorCode.ROUTE_UNAVAILABLE, "canonical assignments are not wired in this daemon")
    return found


def _name(field: str, value: str) -> None:
    check_text(field, value, max_chars=NAME_CHARS, max_bytes=NAME_BYTES)


def _check_observation(index: int, item: ObservationIn) -> None:
    at = f"observations[{index}]"
    _name(f"{at}.entity", item.entity)
    _name(f"{at}.characteristic", item.characteristic)
    _name(f"{at}.supplier", item.supplier)
    check_text(f"{at}.value", item.value, max_chars=VALUE_CHARS)
    if not (math.isfinite(item.trust) and 0.0 <= item.trust <= 1.0):
        raise bad_value(f"{at}.trust must be a number from 0 to 1")
    if item.observed_at is not None and item.observed_at.tzinfo is None:
        raise bad_value(f"{at}.observed_at needs a time zone (e.g. ...Z or +00:00)")


def _dispute_id(request: web.Request) -> uuid.UUID:
    raw = request.match_info["id"]
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ApiError(400, ErrorCode.INVALID_ID, f"{raw[:60]!r} is not a UUID") from None


def _dispute_out(row: dict[str, Any]) -> Dispute:
    """A dispute row as the routes answer it: the wire type states every field."""
    return msgspec.convert(row, Dispute)


def _require_admin(request: web.Request) -> None:
    request.app[SERVICES].access.require_admin(peer(request))


# -- observations and assignments


async def observe(request: web.Request) -> web.Response:
    """`{"observations": [...]}` -> 202 `Observed` (an observation older than the supplier's
    stored one of the same characteristic is accepted but not stored); all or nothing: a 400
    refusing one observation names its position in `index`."""
    services = request.app[SERVICES]
    services.access.require_write(peer(request), SCOPE)
    batch = decode(await read_body(request), ObservationsIn).observations
    if not 1 <= len(batch) <= MAX_OBSERVATIONS:
        raise bad_value(f"observations must hold 1 to {MAX_OBSERVATIONS} items")
    for index, item in enumerate(batch):
        try:
            _check_observation(index, item)
        except ApiError as exc:
            exc.extra["index"] = index  # which one: a client sending a file can name its line
            raise
    stored = await _assignments(request).assignments.observe(
        [
            Observation(
                item.entity,
                item.characteristic,
                item.supplier,
                item.value,
                item.trust,
                item.observed_at.astimezone(dt.UTC) if item.observed_at else None,
            )
            for item in batch
        ]
    )
    return ok(Observed(accepted=len(batch), stored=stored), 202)


async def assignments(request: web.Request) -> web.Response:
    """An entity's canonical values, the characteristics still waiting for their first tick, and
    when this daemon's next tick is due (`AssignmentsOut`); 404 when it has neither."""
    request.app[SERVICES].access.require_read(peer(request), SCOPE)
    entity = request.match_info["entity"]
    _name("entity", entity)
    service = _assignments(request)
    found = await service.assignments.assignments(entity)
    if found is None:
        raise not_found(f"entity {entity[:80]!r}")
    due = service.ticker.next_tick_in_s()
    return ok(msgspec.structs.replace(found, next_tick_in_s=None if due is None else round(due, 3)))


def _key(request: web.Request) -> tuple[str, str]:
    entity, characteristic = request.match_info["entity"], request.match_info["characteristic"]
    _name("entity", entity)
    _name("characteristic", characteristic)
    return entity, characteristic


async def assign_manually(request: web.Request) -> web.Response:
    """`PUT /v1/assignments/{entity}/{characteristic}` `{"value"}`: kept over anything automatic."""
    request.app[SERVICES].access.require_write(peer(request), SCOPE)
    entity, characteristic = _key(request)
    value = decode(await read_body(request), ManualIn).value
    check_text("value", value, max_chars=VALUE_CHARS)
    await _assignments(request).assignments.assign_manually(entity, characteristic, value)
    return ok(ManualAssignment(entity=entity, characteristic=characteristic, value=value, source=str(Source.MANUAL)))


async def unassign_manually(request: web.Request) -> web.Response:
    """`DELETE /v1/assignments/{entity}/{characteristic}`: the chain assigns it again next tick."""
    request.app[SERVICES].access.require_write(peer(request), SCOPE)
    entity, characteristic = _key(request)
    if not await _assignments(request).assignments.unassign_manually(entity, characteristic):
        raise not_found(f"manual assignment of {characteristic[:80]!r}")
    return ok(ManualRemoved(entity=entity, characteristic=characteristic, deleted=True))


# -- disputes (admin)


def _choice(request: web.Request, name: str, allowed: type[DisputeState] | type[Tier]) -> str | None:
    value = request.query.get(name)
    if not value:
        return None
    if value not in {str(m) for m in allowed}:
        raise bad_value(f"{name} must be one of {', '.join(str(m) for m in allowed)}")
    return value


async def list_disputes(request: web.Request) -> web.Response:
    """`?state=`, `?tier=`, `?limit=` (1..1000, default 100), `?after=` (the `next` of a page)."""
    _require_admin(request)
    state = _choice(request, "state", DisputeState)
    level = _choice(request, "tier", Tier)
    try:
        limit = int(request.query.get("limit", "100"))
        after = uuid.UUID(request.query["after"]) if request.query.get("after") else None
    except ValueError:
        raise bad_value("limit must be an integer and after a UUID") from None
    if not 1 <= limit <= 1000:
        raise bad_value("limit must be between 1 and 1000")
    rows = await _assignments(request).disputes.page(state=state, tier=level, limit=limit, after=after)
    following = rows[-1]["id"] if len(rows) == limit else None
    return ok(DisputePage(disputes=[_dispute_out(r) for r in rows], next=following))


async def _shown(service: AssignmentService, dispute_id: uuid.UUID) -> web.Response:
    row = await service.disputes.get(dispute_id)
    if row is None:
        raise not_found(f"dispute {dispute_id}")
    return ok(_dispute_out(row))


async def get_dispute(request: web.Request) -> web.Response:
    _require_admin(request)
    return await _shown(_assignments(request), _dispute_id(request))


async def _refused(service: AssignmentService, dispute_id: uuid.UUID, state: DisputeState, action: str) -> ApiError:
    """409 naming the state the dispute is in and what the caller can do instead."""
    if state is DisputeState.IN_PROGRESS:
        return ApiError(
            409,
            ErrorCode.DISPUTE_IN_PROGRESS,
            f"dispute {dispute_id} is in_progress: the resolver is answering it now; {action} it once it has"
            f" (GET /admin/disputes/{dispute_id} shows its state)",
            state=str(state),
        )
    if state in FINISHED:
        row = await service.disputes.get(dispute_id)
        where = f"/v1/assignments/{row['entity']}/{row['characteristic']}" if row else "/v1/assignments/..."
        return ApiError(
            409,
            ErrorCode.DISPUTE_CLOSED,
            f"dispute {dispute_id} is {state}: there is nothing left to {action}; it opens again when its"
            f" values change, and PUT {where} sets a value now",
            state=str(state),
        )
    return ApiError(409, ErrorCode.CONFLICT, f"{action} does not apply to a dispute in state {state}", state=str(state))


async def _apply(service: AssignmentService, dispute_id: uuid.UUID, outcome: Outcome, action: str) -> DisputeState:
    try:
        return await service.disputes.apply(dispute_id, outcome)
    except KeyError:
        raise not_found(f"dispute {dispute_id}") from None
    except DisputeConflict as exc:
        raise await _refused(service, dispute_id, exc.state, action) from None


async def _state(service: AssignmentService, dispute_id: uuid.UUID) -> tuple[DisputeState, dict[str, Any]]:
    row = await service.disputes.get(dispute_id)
    if row is None:
        raise not_found(f"dispute {dispute_id}")
    return DisputeState(row["state"]), row


async def supersede(request: web.Request) -> web.Response:
    """`DELETE /admin/disputes/{id}`: withdrawn (`superseded`), until its value set changes."""
    _require_admin(request)
    service, dispute_id = _assignments(request), _dispute_id(request)
    await _apply(service, dispute_id, Outcome(Event.SUPERSEDED), "supersede")
    return await _shown(service, dispute_id)


async def force_resolve(request: web.Request) -> web.Response:
    """`{"value"}`: resolved with that value (a manual assignment); no body or no value: sent to
    the resolver now, which applies its answer or sends it to moderation."""
    _require_admin(request)
    service, dispute_id = _assignments(request), _dispute_id(request)
    payload = await read_body(request)
    value = decode(payload, ForceIn).value if payload.strip() else None
    if value is not None:
        check_text("value", value, max_chars=VALUE_CHARS)
        forced = Outcome(Event.DECIDED, value=value, source=Source.MANUAL, decision="force")
        await _apply(service, dispute_id, forced, "force-resolve")
        return await _shown(service, dispute_id)
    if service.resolver is None:
        state, _ = await _state(service, dispute_id)
        if transition(state, Event.FORCED) is None:
            raise await _refused(service, dispute_id, state, "force-resolve")
        raise ApiError(409, ErrorCode.CONFLICT, "the resolver is off ([resolver] enabled = false): give a value")
    try:
        await service.resolver.force(dispute_id)
    except KeyError:
        raise not_found(f"dispute {dispute_id}") from None
    except DisputeConflict as exc:
        raise await _refused(service, dispute_id, exc.state, "force-resolve") from None
    except ResolverBusy as exc:
        raise ApiError(409, ErrorCode.CONFLICT, str(exc)) from None
    except (CircuitOpen, ResolverStopped) as exc:
        raise ApiError(503, ErrorCode.ROUTE_UNAVAILABLE, str(exc)) from None
    return await _shown(service, dispute_id)


async def decide(request: web.Request) -> web.Response:
    """`{"action": "approve"|"override"|"reject"|"escalate", "value"?}` on a dispute in moderation
    (or still pending): approve applies the resolver's answer, only to the values it answered
    (409 `stale_answer` once they changed: the dispute is then superseded), override the value
    given (as a manual assignment), reject keeps the chain's value, escalate leaves it in
    moderation. A state that allows none of these is a 409 naming it (`_refused`)."""
    _require_admin(request)
    service, dispute_id = _assignments(request), _dispute_id(request)
    decision = decode(await read_body(request), DecisionIn)
    if (decision.value is not None) != (decision.action == "override"):
        raise bad_value("value is required with override and only with override")
    if decision.action == "override":
        assert decision.value is not None
        check_text("value", decision.value, max_chars=VALUE_CHARS)
        outcome = Outcome(Event.DECIDED, value=decision.value, source=Source.MANUAL, decision="override")
    elif decision.action == "approve":
        state, row = await _state(service, dispute_id)
        if transition(state, Event.APPROVED) is None:
            raise await _refused(service, dispute_id, state, "approve")
        if row["selected_value"] is None:
            raise ApiError(
                409,
                ErrorCode.NO_ANSWER_TO_APPROVE,
                f"dispute {dispute_id} is {state} without a usable answer from the resolver"
                f" ({row['reason'] or 'not asked yet'}): override it with a value, reject it, or force-resolve it",
                state=str(state),
            )
        outcome = Outcome(Event.APPROVED, value=row["selected_value"], source=Source.LLM_RESOLVED, decision="approve")
    elif decision.action == "reject":
        outcome = Outcome(Event.DECIDED, decision="reject")
    else:
        outcome = Outcome(Event.ESCALATED, decision="escalate")
    after = await _apply(service, dispute_id, outcome, decision.action)
    if outcome.event is Event.APPROVED and after is DisputeState.SUPERSEDED:
        raise ApiError(
            409,
            ErrorCode.STALE_ANSWER,
            f"the observations changed since the resolver answered {outcome.value!r}: the answer was not applied"
            f" and dispute {dispute_id} is superseded; if the new values still tie, the next assignment tick"
            " queues them as a dispute of their own",
            state=str(after),
        )
    return await _shown(service, dispute_id)


def install(app: web.Application) -> None:
    app.router.add_post("/v1/observations", observe)
    # a name may hold "{" and "}" (observations take any text): aiohttp's default parameter
    # pattern, [^{}/]+, would answer such an entity's routes 404
    entity, characteristic = "{entity:[^/]+}", "{characteristic:[^/]+}"
    app.router.add_get(f"/v1/assignments/{entity}", assignments)
    app.router.add_put(f"/v1/assignments/{entity}/{characteristic}", assign_manually)
    app.router.add_delete(f"/v1/assignments/{entity}/{characteristic}", unassign_manually)
    app.router.add_get("/admin/disputes", list_disputes)
    app.router.add_get("/admin/disputes/{id}", get_dispute)
    app.router.add_delete("/admin/disputes/{id}", supersede)
    app.router.add_post("/admin/disputes/{id}/force-resolve", force_resolve)
    app.router.add_post("/admin/moderation/{id}/decide", decide)
