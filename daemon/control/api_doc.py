"""What each route of the control socket does, for docs/openapi.json and docs/API.md.

One entry per route the server registers, in `ROUTES`: a route added to the server without an
entry here (or an entry whose route is gone) fails tests/control/test_openapi.py, which says
what to add. The schemas come from the msgspec wire types named here (`request`, `response`);
an answer that has no struct yet is described in words (`returns`). Regenerate the documents
with `.venv/bin/python -m recalld.control.openapi`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import msgspec

from recalld.control.health import Readiness
from recalld.control.routes.evals import EvalHistory, EvalRecorded, EvalRunIn
from recalld.wire.assignments import (
    AssignmentsOut,
    DecisionIn,
    Dispute,
    DisputePage,
    ForceIn,
    ManualAssignment,
    ManualIn,
    ManualRemoved,
    ObservationsIn,
    Observed,
)
from recalld.wire.duplicates import DuplicateAudit, DuplicateAuditRequest, DuplicateCheck, DuplicateCheckRequest
from recalld.wire.errors import ErrorCode
from recalld.wire.index import BuildStarted, GenerationActivated, Generations
from recalld.wire.recall import Feedback, FeedbackRecorded, RecallRequest, RecallResponse, RecallStats
from recalld.wire.records import (
    BatchResult,
    RecordCreated,
    RecordForgotten,
    RecordIn,
    RecordOut,
    RecordPage,
    RecordsBatch,
    RecordUpdate,
    RecordUpdated,
)
from recalld.wire.service import Capabilities, Liveness, Roles
from recalld.wire.usage import UsageSummary


class ErrorDetail(msgspec.Struct, kw_only=True):
    code: ErrorCode
    """A stable snake_case code (daemon/reasons.py lists every code a client can see)."""
    message: str
    """For people; its wording may change."""


class ErrorBody(msgspec.Struct, kw_only=True):
    """Every 4xx and 5xx answer (5xx only for faults of the daemon itself). Some carry more
    fields beside `error`: a 409 `exact_duplicate` names the record it duplicates in
    `existing_id`, and a 409 `source_path_taken` the record that has the path; a 409 refusing
    a dispute decision names the dispute's `state`; a 400 refusing one observation of a batch
    names its position in `observations` in `index`."""

    error: ErrorDetail


@dataclass(frozen=True)
class RouteDoc:
    """One route, as a newcomer to it needs it."""

    summary: str
    """One line: what the route does."""
    request: type | None = None
    """The msgspec struct of its JSON body; None: no body."""
    response: type | None = None
    """The msgspec struct of its success answer; None: see `returns`."""
    returns: str = ""
    """The success answer in words, when no struct describes it."""
    status: int = 200
    """The success status."""
    query: Mapping[str, str] = field(default_factory=dict)
    """Query parameters -> what each means (those required say so)."""
    content_type: str = "application/json"
    """Of the success answer."""
    admin: bool = False
    """Only for peers allowed to administer (the daemon's own user or root; docs/OPERATIONS.md)."""
    errors: tuple[int, ...] = (400,)
    """Error statuses worth naming beside the ones every route can answer."""
    failure: type | None = None
    """The msgspec struct the route answers with 503 when it reports a failure of its own (the
    health routes: what fails), beside the error body any route may answer 503 with."""


NAMESPACE_REQUIRED = {"namespace": "required: the namespace"}

ROUTES: dict[tuple[str, str], RouteDoc] = {
    # --- health and metrics
    ("GET", "/livez"): RouteDoc(
        "Liveness: the event loop runs and the root supervisor has not given up.",
        response=Liveness,
        failure=Liveness,
        errors=(503,),
    ),
    ("GET", "/readyz"): RouteDoc(
        "Readiness, per component: 503 `fail` when the store or a required route is down, 200 `warn` "
        "for a degraded optional route.",
        response=Readiness,
        failure=Readiness,
        errors=(503,),
    ),
    ("GET", "/metrics"): RouteDoc(
        "Prometheus metrics (text exposition format).", returns="Prometheus text", content_type="text/plain"
    ),
    ("GET", "/v1/capabilities"): RouteDoc(
        "Which features this daemon offers now, and the limits its requests must keep to.",
        response=Capabilities,
    ),
    # --- records
    ("POST", "/v1/records"): RouteDoc(
        "Remember a record; the answer says whether its title is close to an existing one.",
        request=RecordIn,
        response=RecordCreated,
        status=201,
        errors=(400, 409, 413),
    ),
    ("GET", "/v1/records"): RouteDoc(
        "A page of a namespace's live records, in id order.",
        response=RecordPage,
        query={
            **NAMESPACE_REQUIRED,
            "limit": "records per page (default 100)",
            "after": "the last id of the page before",
        },
    ),
    ("POST", "/v1/records:batch"): RouteDoc(
        "Write many records, each on its own as POST /v1/records would (or, with `upsert`, revise the live "
        "record with the same `source_path`): a bad item is reported in its place and the others land.",
        request=RecordsBatch,
        response=BatchResult,
        errors=(400, 413),
    ),
    ("GET", "/v1/records/{id}"): RouteDoc("One live record.", response=RecordOut, errors=(400, 404)),
    ("PUT", "/v1/records/{id}"): RouteDoc(
        "Replace a record's fields (a new revision when anything changed).",
        request=RecordUpdate,
        response=RecordUpdated,
        errors=(400, 404, 409, 413),
    ),
    ("DELETE", "/v1/records/{id}"): RouteDoc(
        "Forget a record: it is never recalled again, and purged later.",
        response=RecordForgotten,
        query={"namespace": "only if the record lives in this namespace (another's answers 404, as a missing id)"},
        errors=(400, 404),
    ),
    # --- recall
    ("POST", "/v1/recall"): RouteDoc(
        "Hybrid recall: full text, vector and structured routes fused; `degraded_routes` names each "
        "route that could not answer fully, and why.",
        request=RecallRequest,
        response=RecallResponse,
        errors=(400, 503),
    ),
    ("POST", "/v1/recall/feedback"): RouteDoc(
        "Say whether a result of a recall was useful (feeds `GET /v1/stats`).",
        request=Feedback,
        response=FeedbackRecorded,
        errors=(400, 404),
    ),
    ("GET", "/v1/stats"): RouteDoc(
        "Recall quality of a namespace from feedback: precision@k and the rank distribution.",
        response=RecallStats,
        query={**NAMESPACE_REQUIRED, "k": "the cut for precision (default 10)"},
    ),
    ("GET", "/v1/usage"): RouteDoc(
        "Embedding usage (calls, tokens, cost) by purpose and namespace.",
        response=UsageSummary,
        query={"namespace": "only this namespace", "since": "RFC 3339 time: only usage from then on"},
    ),
    # --- duplicates
    ("POST", "/v1/duplicates/check"): RouteDoc(
        "The duplicate check a create of this title would run, as a dry run.",
        request=DuplicateCheckRequest,
        response=DuplicateCheck,
    ),
    ("POST", "/v1/duplicates/audit"): RouteDoc(
        "Near-duplicate pairs among a namespace's records, a page of records at a time.",
        request=DuplicateAuditRequest,
        response=DuplicateAudit,
    ),
    # --- the vector index
    ("GET", "/v1/generations"): RouteDoc(
        "The vector index: the current generation, the others, and how many records are not searchable "
        "by the vector route yet (`pending`; `?namespace=` counts that namespace only, and adds its chunks "
        "still to embed, `pending_chunks`). `serving` says which generation this daemon serves (`generation`), "
        "whose files (`files`: `builder`, or `copy`, built here from the stored vectors) and which copy it is "
        "building (`building`); `lag` how far behind it is (`behind`: the pointer names another generation; "
        "`seconds` since it last took in every stored vector; `vectors` stored but not taken in yet, null for "
        "a caller who may not read every namespace).",
        response=Generations,
        query={
            "namespace": "count `pending` in this namespace only (the caller must be allowed to read it), and "
            "add `pending_chunks`: its chunks still to embed, falling as the embedder's answers come back "
            "(what `recalld ingest --wait` counts); the rest of the answer is unchanged"
        },
    ),
    ("POST", "/admin/generations/rebuild"): RouteDoc(
        "Build a new generation now.", response=BuildStarted, status=202, admin=True, errors=(403,)
    ),
    ("POST", "/admin/generations/{id}/activate"): RouteDoc(
        "Serve an earlier verified generation (rollback).",
        response=GenerationActivated,
        admin=True,
        errors=(400, 403, 404, 409),
    ),
    ("GET", "/admin/backup"): RouteDoc(
        "A consistent backup of the store, streamed (a manifest line, then pg_dump's output).",
        returns="application/octet-stream",
        content_type="application/octet-stream",
        admin=True,
        errors=(403, 503),
    ),
    ("GET", "/admin/roles"): RouteDoc(
        "Which daemon of those sharing the database holds each role now: the builder, the assignment and "
        "resolver tickers, the sweeper's database work. Each role: `lock` (its advisory lock's name), `here` "
        "(this daemon holds it), `holder` (the session holding it; null when free: the tickers and the "
        "sweeper hold theirs for one step at a time).",
        response=Roles,
        admin=True,
        errors=(403,),
    ),
    # --- evaluation
    ("POST", "/v1/evals"): RouteDoc(
        "Record the figures of an evaluation run.", request=EvalRunIn, response=EvalRecorded, status=201
    ),
    ("GET", "/v1/evals"): RouteDoc(
        "Earlier evaluation runs, newest first.",
        response=EvalHistory,
        query={"golden": "only runs of this golden set", "limit": "at most this many runs"},
    ),
    # --- canonical assignments and disputes
    ("POST", "/v1/observations"): RouteDoc(
        "Report what suppliers say about entities' characteristics.",
        request=ObservationsIn,
        response=Observed,
        status=202,
    ),
    ("GET", "/v1/assignments/{entity}"): RouteDoc(
        "An entity's canonical values with their candidates and open disputes, the characteristics"
        " observed but not assigned yet, and when the next assignment tick is due.",
        response=AssignmentsOut,
        errors=(400, 404),
    ),
    ("PUT", "/v1/assignments/{entity}/{characteristic}"): RouteDoc(
        "Set a value by hand (it wins over suppliers).",
        request=ManualIn,
        response=ManualAssignment,
    ),
    ("DELETE", "/v1/assignments/{entity}/{characteristic}"): RouteDoc(
        "Remove a value set by hand.", response=ManualRemoved, errors=(400, 404)
    ),
    ("GET", "/admin/disputes"): RouteDoc(
        "Disputes, filtered by state and tier, a page at a time.",
        response=DisputePage,
        query={"state": "only this state", "tier": "only this tier", "limit": "per page", "after": "the last id seen"},
        admin=True,
        errors=(400, 403),
    ),
    ("GET", "/admin/disputes/{id}"): RouteDoc("One dispute.", response=Dispute, admin=True, errors=(400, 403, 404)),
    ("DELETE", "/admin/disputes/{id}"): RouteDoc(
        "Supersede a dispute.", response=Dispute, admin=True, errors=(400, 403, 404, 409)
    ),
    ("POST", "/admin/disputes/{id}/force-resolve"): RouteDoc(
        "Resolve a dispute now, with a value or the best candidate.",
        request=ForceIn,
        response=Dispute,
        admin=True,
        errors=(400, 403, 404, 409),
    ),
    ("POST", "/admin/moderation/{id}/decide"): RouteDoc(
        "A moderator's decision on an escalated dispute.",
        request=DecisionIn,
        response=Dispute,
        admin=True,
        errors=(400, 403, 404, 409),
    ),
}
