"""The control API's routes as requests, for the typed methods of `recalld.client.calls`.

A `Call` is one request and how to read its answer; `build` makes them from the daemon's wire
types, one static method per route, so a bad argument fails here, before anything is sent.
docs/API.md describes each route.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import msgspec

from recalld.wire.assignments import (
    MAX_OBSERVATIONS,
    Action,
    AssignmentsOut,
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
from recalld.wire.duplicates import DuplicateAuditRequest, DuplicateCheck, DuplicateCheckRequest
from recalld.wire.recall import Feedback, RecallRequest, RecallResponse, Route
from recalld.wire.records import BatchResult, RecordCreated, RecordIn, RecordOut, RecordUpdate, RecordUpdated
from recalld.wire.service import Capabilities

T = TypeVar("T")
JSON = dict[str, Any]


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    content: bytes | None
    params: dict[str, str] | None
    answer: Callable[[bytes], T]
    """Reads the success answer's body."""


def _typed(into: type[T]) -> Callable[[bytes], T]:
    return lambda body: msgspec.json.decode(body, type=into)


def _json(body: bytes) -> JSON:
    answer: JSON = msgspec.json.decode(body)
    return answer


def _params(**values: object) -> dict[str, str] | None:
    chosen = {name: str(value) for name, value in values.items() if value is not None}
    return chosen or None


def _segment(name: str) -> str:
    """A name as one path segment: `/` and the rest percent-encoded (entities take any text)."""
    return quote(name, safe="")


class InvalidId(ValueError):
    """A record's id that is no UUID, refused before anything is sent: as a path segment it
    could name another route."""


def _record_id(record_id: uuid.UUID | str) -> uuid.UUID:
    if isinstance(record_id, uuid.UUID):
        return record_id
    try:
        return uuid.UUID(str(record_id))
    except ValueError:
        raise InvalidId(f"{str(record_id)[:60]!r} is not a UUID") from None


def _dispute_path(dispute_id: uuid.UUID | str) -> str:
    # the daemon checks the id (a 400 `invalid_id` names what is wrong with it)
    return f"/admin/disputes/{_segment(str(dispute_id))}"


def _record(
    into: type[RecordIn] | type[RecordUpdate],
    namespace: str,
    kind: str,
    title: str,
    body: str,
    attributes: Mapping[str, Any] | None,
    source_path: str | None,
    **more: Any,
) -> bytes:
    """A create's or an update's body: the same fields (a create may also name its `id`)."""
    record = into(
        namespace=namespace,
        kind=kind,
        title=title,
        body=body,
        attributes=dict(attributes or {}),
        source_path=source_path,
        **more,
    )
    return msgspec.json.encode(record)


class build:
    """The calls, one static method per route (see `Calls` for what each answers)."""

    @staticmethod
    def create_record(
        namespace: str,
        kind: str,
        title: str,
        body: str,
        *,
        attributes: Mapping[str, Any] | None = None,
        source_path: str | None = None,
        id: uuid.UUID | None = None,
    ) -> Call[RecordCreated]:
        record = _record(RecordIn, namespace, kind, title, body, attributes, source_path, id=id)
        return Call("POST", "/v1/records", record, None, _typed(RecordCreated))

    @staticmethod
    def write_records(records: Sequence[Mapping[str, Any]], *, upsert: bool = False) -> Call[BatchResult]:
        # each item as POST /v1/records takes it; the daemon checks and answers each on its own
        body = msgspec.json.encode({"records": records, "upsert": upsert})
        return Call("POST", "/v1/records:batch", body, None, _typed(BatchResult))

    @staticmethod
    def get_record(record_id: uuid.UUID | str) -> Call[RecordOut]:
        return Call("GET", f"/v1/records/{_record_id(record_id)}", None, None, _typed(RecordOut))

    @staticmethod
    def update_record(
        record_id: uuid.UUID | str,
        namespace: str,
        kind: str,
        title: str,
        body: str,
        *,
        attributes: Mapping[str, Any] | None = None,
        source_path: str | None = None,
    ) -> Call[RecordUpdated]:
        update = _record(RecordUpdate, namespace, kind, title, body, attributes, source_path)
        path = f"/v1/records/{_record_id(record_id)}"
        return Call("PUT", path, update, None, _typed(RecordUpdated))

    @staticmethod
    def forget_record(record_id: uuid.UUID | str, *, namespace: str | None = None) -> Call[JSON]:
        return Call("DELETE", f"/v1/records/{_record_id(record_id)}", None, _params(namespace=namespace), _json)

    @staticmethod
    def list_records(namespace: str, *, limit: int | None = None, after: uuid.UUID | None = None) -> Call[JSON]:
        return Call("GET", "/v1/records", None, _params(namespace=namespace, limit=limit, after=after), _json)

    @staticmethod
    def recall(
        namespace: str,
        query: str,
        *,
        k: int | None = None,
        kinds: list[str] | None = None,
        attributes: Mapping[str, Any] | None = None,
        routes: list[Route] | None = None,
        fusion: Literal["rrf", "weighted"] | None = None,
        deadline_ms: int | None = None,
        thresholds: Mapping[Literal["vector"], float] | None = None,
    ) -> Call[RecallResponse]:
        request = RecallRequest(
            namespace=namespace,
            query=query,
            k=k,
            kinds=kinds,
            attributes=dict(attributes) if attributes is not None else None,
            routes=routes,
            fusion=fusion,
            deadline_ms=deadline_ms,
            thresholds=dict(thresholds) if thresholds is not None else None,
        )
        return Call("POST", "/v1/recall", msgspec.json.encode(request), None, _typed(RecallResponse))

    @staticmethod
    def feedback(search_id: uuid.UUID | str, record_id: uuid.UUID | str, *, useful: bool) -> Call[JSON]:
        judgement = Feedback(search_id=uuid.UUID(str(search_id)), id=uuid.UUID(str(record_id)), useful=useful)
        return Call("POST", "/v1/recall/feedback", msgspec.json.encode(judgement), None, _json)

    @staticmethod
    def check_duplicate(namespace: str, kind: str, title: str) -> Call[DuplicateCheck]:
        asked = DuplicateCheckRequest(namespace=namespace, kind=kind, title=title)
        return Call("POST", "/v1/duplicates/check", msgspec.json.encode(asked), None, _typed(DuplicateCheck))

    @staticmethod
    def audit_duplicates(
        namespace: str, *, kind: str | None = None, after: uuid.UUID | str | None = None, limit: int | None = None
    ) -> Call[JSON]:
        asked = DuplicateAuditRequest(
            namespace=namespace, kind=kind, after=None if after is None else uuid.UUID(str(after))
        )
        if limit is not None:  # else the route's own default
            asked = msgspec.structs.replace(asked, limit=limit)
        return Call("POST", "/v1/duplicates/audit", msgspec.json.encode(asked), None, _json)

    @staticmethod
    def usage(namespace: str | None = None, *, since: str | None = None) -> Call[JSON]:
        return Call("GET", "/v1/usage", None, _params(namespace=namespace, since=since), _json)

    @staticmethod
    def stats(namespace: str, *, k: int | None = None) -> Call[JSON]:
        return Call("GET", "/v1/stats", None, _params(namespace=namespace, k=k), _json)

    @staticmethod
    def generations(namespace: str | None = None) -> Call[JSON]:
        return Call("GET", "/v1/generations", None, _params(namespace=namespace), _json)

    @staticmethod
    def rebuild_generations() -> Call[JSON]:
        return Call("POST", "/admin/generations/rebuild", msgspec.json.encode({}), None, _json)

    @staticmethod
    def activate_generation(generation_id: str) -> Call[JSON]:
        path = f"/admin/generations/{_segment(generation_id)}/activate"
        return Call("POST", path, msgspec.json.encode({}), None, _json)

    @staticmethod
    def roles() -> Call[JSON]:
        return Call("GET", "/admin/roles", None, None, _json)

    @staticmethod
    def record_eval(run: Mapping[str, Any]) -> Call[JSON]:
        return Call("POST", "/v1/evals", msgspec.json.encode(run), None, _json)

    @staticmethod
    def evals(*, golden: str | None = None, limit: int | None = None) -> Call[JSON]:
        return Call("GET", "/v1/evals", None, _params(golden=golden, limit=limit), _json)

    @staticmethod
    def capabilities() -> Call[Capabilities]:
        return Call("GET", "/v1/capabilities", None, None, _typed(Capabilities))

    @staticmethod
    def observe(observations: Sequence[ObservationIn]) -> Call[Observed]:
        if not 1 <= len(observations) <= MAX_OBSERVATIONS:
            raise ValueError(f"one request takes 1 to {MAX_OBSERVATIONS} observations, not {len(observations)}")
        body = msgspec.json.encode(ObservationsIn(observations=list(observations)))
        return Call("POST", "/v1/observations", body, None, _typed(Observed))

    @staticmethod
    def assignments(entity: str) -> Call[AssignmentsOut]:
        return Call("GET", f"/v1/assignments/{_segment(entity)}", None, None, _typed(AssignmentsOut))

    @staticmethod
    def assign(entity: str, characteristic: str, value: str) -> Call[ManualAssignment]:
        path = f"/v1/assignments/{_segment(entity)}/{_segment(characteristic)}"
        return Call("PUT", path, msgspec.json.encode(ManualIn(value=value)), None, _typed(ManualAssignment))

    @staticmethod
    def unassign(entity: str, characteristic: str) -> Call[ManualRemoved]:
        path = f"/v1/assignments/{_segment(entity)}/{_segment(characteristic)}"
        return Call("DELETE", path, None, None, _typed(ManualRemoved))

    @staticmethod
    def disputes(
        *, state: str | None = None, tier: str | None = None, limit: int | None = None, after: uuid.UUID | None = None
    ) -> Call[DisputePage]:
        params = _params(state=state, tier=tier, limit=limit, after=after)
        return Call("GET", "/admin/disputes", None, params, _typed(DisputePage))

    @staticmethod
    def dispute(dispute_id: uuid.UUID | str) -> Call[Dispute]:
        return Call("GET", _dispute_path(dispute_id), None, None, _typed(Dispute))

    @staticmethod
    def force_resolve(dispute_id: uuid.UUID | str, *, value: str | None = None) -> Call[Dispute]:
        body = None if value is None else msgspec.json.encode(ForceIn(value=value))
        return Call("POST", f"{_dispute_path(dispute_id)}/force-resolve", body, None, _typed(Dispute))

    @staticmethod
    def supersede(dispute_id: uuid.UUID | str) -> Call[Dispute]:
        return Call("DELETE", _dispute_path(dispute_id), None, None, _typed(Dispute))

    @staticmethod
    def decide(dispute_id: uuid.UUID | str, action: Action, *, value: str | None = None) -> Call[Dispute]:
        body = msgspec.json.encode(DecisionIn(action=action, value=value))
        path = f"/admin/moderation/{_segment(str(dispute_id))}/decide"
        return Call("POST", path, body, None, _typed(Dispute))

    @staticmethod
    def live() -> Call[JSON]:
        return Call("GET", "/livez", None, None, _json)

    @staticmethod
    def ready() -> Call[JSON]:
        return Call("GET", "/readyz", None, None, _json)
