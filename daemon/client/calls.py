"""The typed calls of the control API, for `recalld.client.Client` and `AsyncClient`.

A `Call` is one request and how to read its answer: `build` makes them from the daemon's wire
types (so a bad argument fails here, before anything is sent), `Calls` and `AsyncCalls` give both
clients the same named methods over them. docs/API.md describes each route.
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
from recalld.wire.duplicates import DuplicateCheck, DuplicateCheckRequest
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
    def write_records(records: list[Mapping[str, Any]], *, upsert: bool = False) -> Call[BatchResult]:
        # each item as POST /v1/records takes it; the daemon checks and answers each on its own
        body = msgspec.json.encode({"records": records, "upsert": upsert})
        return Call("POST", "/v1/records:batch", body, None, _typed(BatchResult))

    @staticmethod
    def get_record(record_id: uuid.UUID | str) -> Call[RecordOut]:
        return Call("GET", f"/v1/records/{uuid.UUID(str(record_id))}", None, None, _typed(RecordOut))

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
        path = f"/v1/records/{uuid.UUID(str(record_id))}"
        return Call("PUT", path, update, None, _typed(RecordUpdated))

    @staticmethod
    def forget_record(record_id: uuid.UUID | str) -> Call[JSON]:
        return Call("DELETE", f"/v1/records/{uuid.UUID(str(record_id))}", None, None, _json)

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
    def usage(namespace: str | None = None, *, since: str | None = None) -> Call[JSON]:
        return Call("GET", "/v1/usage", None, _params(namespace=namespace, since=since), _json)

    @staticmethod
    def stats(namespace: str, *, k: int | None = None) -> Call[JSON]:
        return Call("GET", "/v1/stats", None, _params(namespace=namespace, k=k), _json)

    @staticmethod
    def generations(namespace: str | None = None) -> Call[JSON]:
        return Call("GET", "/v1/generations", None, _params(namespace=namespace), _json)

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
    def ready() -> Call[JSON]:
        return Call("GET", "/readyz", None, None, _json)


class Calls:
    """The typed methods of the sync client: each sends one route and answers its wire type."""

    def call(self, call: Call[T]) -> T:
        raise NotImplementedError

    def create_record(self, namespace: str, kind: str, title: str, body: str, **options: Any) -> RecordCreated:
        """Remember a record (`attributes`, `source_path`, `id` optional); a 409 `exact_duplicate`
        raises ClientError with `existing_id`."""
        return self.call(build.create_record(namespace, kind, title, body, **options))

    def write_records(self, records: list[Mapping[str, Any]], *, upsert: bool = False) -> BatchResult:
        """Many creates (or, with `upsert`, revisions by `source_path`) in one request; one result
        per item, in order: a refused item does not stop the others."""
        return self.call(build.write_records(records, upsert=upsert))

    def get_record(self, record_id: uuid.UUID | str) -> RecordOut:
        return self.call(build.get_record(record_id))

    def update_record(
        self, record_id: uuid.UUID | str, namespace: str, kind: str, title: str, body: str, **options: Any
    ) -> RecordUpdated:
        return self.call(build.update_record(record_id, namespace, kind, title, body, **options))

    def forget_record(self, record_id: uuid.UUID | str) -> JSON:
        return self.call(build.forget_record(record_id))

    def list_records(self, namespace: str, **options: Any) -> JSON:
        return self.call(build.list_records(namespace, **options))

    def recall(self, namespace: str, query: str, **options: Any) -> RecallResponse:
        """Hybrid recall (`k`, `kinds`, `attributes`, `routes`, `fusion`, `deadline_ms`)."""
        return self.call(build.recall(namespace, query, **options))

    def feedback(self, search_id: uuid.UUID | str, record_id: uuid.UUID | str, *, useful: bool) -> JSON:
        return self.call(build.feedback(search_id, record_id, useful=useful))

    def check_duplicate(self, namespace: str, kind: str, title: str) -> DuplicateCheck:
        return self.call(build.check_duplicate(namespace, kind, title))

    def usage(self, namespace: str | None = None, **options: Any) -> JSON:
        return self.call(build.usage(namespace, **options))

    def stats(self, namespace: str, **options: Any) -> JSON:
        return self.call(build.stats(namespace, **options))

    def generations(self, namespace: str | None = None) -> JSON:
        return self.call(build.generations(namespace))

    def capabilities(self) -> Capabilities:
        """What the daemon offers now, and the limits its requests must keep to."""
        return self.call(build.capabilities())

    def observe(self, observations: Sequence[ObservationIn]) -> Observed:
        """Report suppliers' observations, 1 to `MAX_OBSERVATIONS` in one call, stored all or none:
        a refusal (ClientError 400) names the observation refused by its position in `body["index"]`."""
        return self.call(build.observe(observations))

    def assignments(self, entity: str) -> AssignmentsOut:
        """An entity's canonical values, the characteristics observed but not assigned yet, and
        when the next assignment tick is due; a 404 ClientError when it has neither."""
        return self.call(build.assignments(entity))

    def assign(self, entity: str, characteristic: str, value: str) -> ManualAssignment:
        """Set a value by hand: kept over anything automatic until `unassign`."""
        return self.call(build.assign(entity, characteristic, value))

    def unassign(self, entity: str, characteristic: str) -> ManualRemoved:
        """Remove a value set by hand (a 404 ClientError when there is none): the next tick
        assigns the characteristic from its observations."""
        return self.call(build.unassign(entity, characteristic))

    def disputes(self, **options: Any) -> DisputePage:
        """A page of disputes in id order (`state`, `tier`, `limit` 1..1000, `after`: the page's
        `next`), administrators only."""
        return self.call(build.disputes(**options))

    def dispute(self, dispute_id: uuid.UUID | str) -> Dispute:
        return self.call(build.dispute(dispute_id))

    def force_resolve(self, dispute_id: uuid.UUID | str, *, value: str | None = None) -> Dispute:
        """Resolve now: with `value`, as a manual assignment; without, by the resolver."""
        return self.call(build.force_resolve(dispute_id, value=value))

    def supersede(self, dispute_id: uuid.UUID | str) -> Dispute:
        """Withdraw a dispute (terminal until its values change)."""
        return self.call(build.supersede(dispute_id))

    def decide(self, dispute_id: uuid.UUID | str, action: Action, *, value: str | None = None) -> Dispute:
        """A moderation decision: approve, override (with `value`), reject or escalate; a
        decision the dispute's state does not allow is a 409 ClientError naming the state."""
        return self.call(build.decide(dispute_id, action, value=value))


class AsyncCalls:
    """The same methods for the async client, awaited."""

    async def call(self, call: Call[T]) -> T:
        raise NotImplementedError

    async def create_record(self, namespace: str, kind: str, title: str, body: str, **options: Any) -> RecordCreated:
        return await self.call(build.create_record(namespace, kind, title, body, **options))

    async def write_records(self, records: list[Mapping[str, Any]], *, upsert: bool = False) -> BatchResult:
        return await self.call(build.write_records(records, upsert=upsert))

    async def get_record(self, record_id: uuid.UUID | str) -> RecordOut:
        return await self.call(build.get_record(record_id))

    async def update_record(
        self, record_id: uuid.UUID | str, namespace: str, kind: str, title: str, body: str, **options: Any
    ) -> RecordUpdated:
        return await self.call(build.update_record(record_id, namespace, kind, title, body, **options))

    async def forget_record(self, record_id: uuid.UUID | str) -> JSON:
        return await self.call(build.forget_record(record_id))

    async def list_records(self, namespace: str, **options: Any) -> JSON:
        return await self.call(build.list_records(namespace, **options))

    async def recall(self, namespace: str, query: str, **options: Any) -> RecallResponse:
        return await self.call(build.recall(namespace, query, **options))

    async def feedback(self, search_id: uuid.UUID | str, record_id: uuid.UUID | str, *, useful: bool) -> JSON:
        return await self.call(build.feedback(search_id, record_id, useful=useful))

    async def check_duplicate(self, namespace: str, kind: str, title: str) -> DuplicateCheck:
        return await self.call(build.check_duplicate(namespace, kind, title))

    async def usage(self, namespace: str | None = None, **options: Any) -> JSON:
        return await self.call(build.usage(namespace, **options))

    async def stats(self, namespace: str, **options: Any) -> JSON:
        return await self.call(build.stats(namespace, **options))

    async def generations(self, namespace: str | None = None) -> JSON:
        return await self.call(build.generations(namespace))

    async def capabilities(self) -> Capabilities:
        return await self.call(build.capabilities())

    async def observe(self, observations: Sequence[ObservationIn]) -> Observed:
        return await self.call(build.observe(observations))

    async def assignments(self, entity: str) -> AssignmentsOut:
        return await self.call(build.assignments(entity))

    async def assign(self, entity: str, characteristic: str, value: str) -> ManualAssignment:
        return await self.call(build.assign(entity, characteristic, value))

    async def unassign(self, entity: str, characteristic: str) -> ManualRemoved:
        return await self.call(build.unassign(entity, characteristic))

    async def disputes(self, **options: Any) -> DisputePage:
        return await self.call(build.disputes(**options))

    async def dispute(self, dispute_id: uuid.UUID | str) -> Dispute:
        return await self.call(build.dispute(dispute_id))

    async def force_resolve(self, dispute_id: uuid.UUID | str, *, value: str | None = None) -> Dispute:
        return await self.call(build.force_resolve(dispute_id, value=value))

    async def supersede(self, dispute_id: uuid.UUID | str) -> Dispute:
        return await self.call(build.supersede(dispute_id))

    async def decide(self, dispute_id: uuid.UUID | str, action: Action, *, value: str | None = None) -> Dispute:
        return await self.call(build.decide(dispute_id, action, value=value))
