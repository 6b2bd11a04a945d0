"""Recall: what `POST /v1/recall` and `POST /v1/recall/feedback` take and answer, and `GET /v1/stats`."""

from __future__ import annotations

import uuid
from typing import Any, Literal

import msgspec

from recalld.wire.base import Request

Route = Literal["fts", "vector", "structured"]
Fusion = Literal["rrf", "weighted"]
ROUTES: tuple[Route, ...] = ("fts", "vector", "structured")


class RecallRequest(Request):
    namespace: str
    query: str
    k: int | None = None
    kinds: list[str] | None = None
    attributes: dict[str, Any] | None = None
    routes: list[Route] | None = None
    fusion: Fusion | None = None
    deadline_ms: int | None = None
    thresholds: dict[Literal["vector"], float] | None = None
    """Per route, the least score a candidate must reach (`[recall] thresholds`, which these
    take precedence over; -1 turns a configured vector floor off); `vector` is a cosine
    similarity in [-1, 1]. When no vector candidate reaches it, full text answers as it does alone."""


class Feedback(Request):
    search_id: uuid.UUID
    id: uuid.UUID
    useful: bool


class FeedbackRecorded(msgspec.Struct, kw_only=True):
    """The judgement stored (a second one on the same result replaces the first)."""

    search_id: uuid.UUID
    id: uuid.UUID
    rank: int
    """The result's rank in that recall's answer, from 1."""
    useful: bool


class RecallHit(msgspec.Struct, kw_only=True, omit_defaults=True):
    id: uuid.UUID
    title: str
    kind: str
    source_path: str | None
    score: float
    routes: dict[str, int]
    route_scores: dict[str, float] = {}
    """Each route's own score for the record: `vector` the cosine of its best chunk (what
    `thresholds.vector` compares), `fts` the evidence level plus ts_rank / (ts_rank + 1),
    `structured` the record's last change in seconds since the epoch (its order)."""
    revision: int
    snippet: str | None = None


class DegradedRoute(msgspec.Struct, kw_only=True, omit_defaults=True):
    # `pending` only where it means something (omit_defaults): the v1 shape stays as it was
    # (docs/DESIGN.md, "The control socket and its wire contract").
    route: str
    reason: str
    message: str = ""
    pending: int | None = None
    """`vector_indexing`: records of the namespace the vector route cannot find yet."""


class FusionInfo(msgspec.Struct, kw_only=True):
    name: str
    version: int
    weights: dict[str, float]
    k: float | None = None
    evidence: dict[str, float] = {}
    """The factor on a full-text candidate by what it matched (`[recall] fts_evidence_weights`)."""
    thresholds: dict[str, float] = {}
    """The least score each route's candidates had to reach (config and request together)."""


class RecallResponse(msgspec.Struct, kw_only=True):
    results: list[RecallHit]
    degraded_routes: list[DegradedRoute]
    fusion: FusionInfo
    generation: str | None
    timings_ms: dict[str, float]
    search_id: uuid.UUID


class RecallStats(msgspec.Struct, kw_only=True):
    """`GET /v1/stats`: a namespace's recall quality, from the searches recorded and the feedback
    on their results."""

    namespace: str
    k: int
    """The cut for precision (`?k=`)."""
    searches: int
    degraded_searches: int
    """Searches with at least one degraded route."""
    empty_searches: int
    """Searches that answered no result."""
    searches_with_feedback: int
    judged_at_k: int
    """Results ranked at most `k` that were judged (useful or not)."""
    useful_at_k: int
    precision_at_k: float | None
    """useful_at_k / judged_at_k, to 4 places; None while nothing is judged."""
    useful_rank_distribution: dict[str, int]
    """Results judged useful, by their rank (1 the first)."""
