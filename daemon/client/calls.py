"""The typed methods of `recalld.client.Client` and `AsyncClient`: `Calls` and `AsyncCalls` give
both clients the same named methods, each sending one route's request (`recalld.client.routes`)
and answering its wire type.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from recalld.client.routes import JSON, Call, build
from recalld.wire.assignments import (
    Action,
    AssignmentsOut,
    Dispute,
    DisputePage,
    ManualAssignment,
    ManualRemoved,
    ObservationIn,
    Observed,
)
from recalld.wire.duplicates import DuplicateCheck
from recalld.wire.recall import RecallResponse
from recalld.wire.records import BatchResult, RecordCreated, RecordOut, RecordUpdated
from recalld.wire.service import Capabilities

T = TypeVar("T")


class Calls:
    """The typed methods of the sync client: each sends one route and answers its wire type."""

    def call(self, call: Call[T]) -> T:
        raise NotImplementedError

    def create_record(self, namespace: str, kind: str, title: str, body: str, **options: Any) -> RecordCreated:
        """Remember a record (`attributes`, `source_path`, `id` optional); a 409 `exact_duplicate`
        raises ClientError with `existing_id`."""
        return self.call(build.create_record(namespace, kind, title, body, **options))

    def write_records(self, records: Sequence[Mapping[str, Any]], *, upsert: bool = False) -> BatchResult:
        """Many creates (or, with `upsert`, revisions by `source_path`) in one request; one result
        per item, in order: a refused item does not stop the others."""
        return self.call(build.write_records(records, upsert=upsert))

    def get_record(self, record_id: uuid.UUID | str) -> RecordOut:
        return self.call(build.get_record(record_id))

    def update_record(
        self, record_id: uuid.UUID | str, namespace: str, kind: str, title: str, body: str, **options: Any
    ) -> RecordUpdated:
        return self.call(build.update_record(record_id, namespace, kind, title, body, **options))

    def forget_record(self, record_id: uuid.UUID | str, *, namespace: str | None = None) -> JSON:
        """Forget a record; with `namespace`, only if it lives there (another's is not found)."""
        return self.call(build.forget_record(record_id, namespace=namespace))

    def list_records(self, namespace: str, **options: Any) -> JSON:
        return self.call(build.list_records(namespace, **options))

    def recall(self, namespace: str, query: str, **options: Any) -> RecallResponse:
        """Hybrid recall (`k`, `kinds`, `attributes`, `routes`, `fusion`, `deadline_ms`, `thresholds`)."""
        return self.call(build.recall(namespace, query, **options))

    def feedback(self, search_id: uuid.UUID | str, record_id: uuid.UUID | str, *, useful: bool) -> JSON:
        return self.call(build.feedback(search_id, record_id, useful=useful))

    def check_duplicate(self, namespace: str, kind: str, title: str) -> DuplicateCheck:
        return self.call(build.check_duplicate(namespace, kind, title))

    def audit_duplicates(self, namespace: str, **options: Any) -> JSON:
        """A page of the namespace's near-duplicate title pairs (`kind`, `limit` records, `after`:
        the page's `next`): `pairs`, `scanned`, `of`, `compared`, `threshold`, `next`."""
        return self.call(build.audit_duplicates(namespace, **options))

    def usage(self, namespace: str | None = None, **options: Any) -> JSON:
        """Embedding usage per namespace and purpose (`since`, RFC 3339); without a namespace,
        every namespace's and the daemon's own (administrators only)."""
        return self.call(build.usage(namespace, **options))

    def stats(self, namespace: str, **options: Any) -> JSON:
        """The namespace's recall quality from feedback: precision@`k` and the useful results' ranks."""
        return self.call(build.stats(namespace, **options))

    def generations(self, namespace: str | None = None) -> JSON:
        """Vector index generations, builds, and the records still `pending` (of `namespace`
        alone when given, with its `pending_chunks`); a 503 `route_unavailable` ClientError when
        the daemon has no vector index."""
        return self.call(build.generations(namespace))

    def rebuild_generations(self) -> JSON:
        """Queue a build of a new generation (administrators only): its `build_id`."""
        return self.call(build.rebuild_generations())

    def activate_generation(self, generation_id: str) -> JSON:
        """Make an earlier verified generation current (administrators only)."""
        return self.call(build.activate_generation(generation_id))

    def roles(self) -> JSON:
        """Who holds each role of those sharing the database now (administrators only): `host`,
        and `roles`, each with `role`, `lock`, `here` and `holder` (null when free)."""
        return self.call(build.roles())

    def record_eval(self, run: Mapping[str, Any]) -> JSON:
        """Keep a `recalld eval` run in the daemon's eval history (docs/EVAL.md): its `id`."""
        return self.call(build.record_eval(run))

    def evals(self, **options: Any) -> JSON:
        """The recorded eval runs, newest first (`golden`: one set's; `limit`)."""
        return self.call(build.evals(**options))

    def live(self) -> JSON:
        """`/livez`: a 503 ClientError, its body the checks, when the daemon is not live."""
        return self.call(build.live())

    def ready(self) -> JSON:
        """`/readyz`: `status` pass or warn (degraded) with each check; a 503 ClientError, its
        body the checks, when the daemon is not ready."""
        return self.call(build.ready())

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

    async def write_records(self, records: Sequence[Mapping[str, Any]], *, upsert: bool = False) -> BatchResult:
        return await self.call(build.write_records(records, upsert=upsert))

    async def get_record(self, record_id: uuid.UUID | str) -> RecordOut:
        return await self.call(build.get_record(record_id))

    async def update_record(
        self, record_id: uuid.UUID | str, namespace: str, kind: str, title: str, body: str, **options: Any
    ) -> RecordUpdated:
        return await self.call(build.update_record(record_id, namespace, kind, title, body, **options))

    async def forget_record(self, record_id: uuid.UUID | str, *, namespace: str | None = None) -> JSON:
        """Forget a record; with `namespace`, only if it lives there (another's is not found)."""
        return await self.call(build.forget_record(record_id, namespace=namespace))

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

    async def audit_duplicates(self, namespace: str, **options: Any) -> JSON:
        return await self.call(build.audit_duplicates(namespace, **options))

    async def generations(self, namespace: str | None = None) -> JSON:
        return await self.call(build.generations(namespace))

    async def rebuild_generations(self) -> JSON:
        return await self.call(build.rebuild_generations())

    async def activate_generation(self, generation_id: str) -> JSON:
        return await self.call(build.activate_generation(generation_id))

    async def roles(self) -> JSON:
        return await self.call(build.roles())

    async def record_eval(self, run: Mapping[str, Any]) -> JSON:
        return await self.call(build.record_eval(run))

    async def evals(self, **options: Any) -> JSON:
        return await self.call(build.evals(**options))

    async def live(self) -> JSON:
        return await self.call(build.live())

    async def ready(self) -> JSON:
        return await self.call(build.ready())

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
