"""What the daemon says of itself: `GET /v1/capabilities`."""

from __future__ import annotations

from typing import Literal

import msgspec


class Capability(msgspec.Struct, kw_only=True):
    name: str
    """`recall.fts.v1`, `recall.vector.v1`, `embedding.v1`, `duplicates.v1`, ..."""
    available: bool
    """Whether the daemon can serve it right now."""


class Limits(msgspec.Struct, kw_only=True):
    """The configured limits a client plans its requests by, so that it need not guess them
    (`[records]`, `[recall]`)."""

    max_title_chars: int
    max_body_chars: int
    max_batch: int
    """Records in one `POST /v1/records:batch`."""
    max_k: int
    """The largest `k` a recall takes."""
    max_query_chars: int


class Capabilities(msgspec.Struct, kw_only=True):
    capabilities: list[Capability]
    limits: Limits


class Liveness(msgspec.Struct, kw_only=True):
    """`GET /livez`: `pass` (200) while the event loop runs and the root supervisor has not given
    up; `fail` (503) once it has."""

    status: Literal["pass", "fail"]
