"""What the daemon says of itself: `GET /v1/capabilities`, `GET /livez`, `GET /admin/roles`."""

from __future__ import annotations

import datetime as dt
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


class RoleHolder(msgspec.Struct, kw_only=True):
    """The PostgreSQL session holding a role's advisory lock."""

    application_name: str
    """`recalld builder <host>` for the builder's own connection; a daemon's pool's name else."""
    client_addr: str | None
    """None: over a Unix socket."""
    pid: int
    """The session's backend process id."""
    since: dt.datetime | None
    """When the session began."""


class Role(msgspec.Struct, kw_only=True):
    role: str
    """What the role does, for people (`builder`, ...)."""
    lock: str
    """Its advisory lock's name."""
    here: bool
    """This daemon holds it now."""
    holder: RoleHolder | None
    """None while free: the tickers and the sweeper hold theirs for one step at a time."""


class Roles(msgspec.Struct, kw_only=True):
    """`GET /admin/roles`: which daemon of those sharing the database holds each role now."""

    host: str
    """This daemon's host name."""
    roles: list[Role]
