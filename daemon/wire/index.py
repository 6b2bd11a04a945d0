"""The vector index: what `GET /v1/generations` and the administration routes
(`POST /admin/generations/...`) answer.

Fields marked "administrators only" are absent from a caller who is no administrator; those
marked "whole readers only" are absent from a caller who may read only some namespaces."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType


class BuildStarted(msgspec.Struct, kw_only=True):
    """`POST /admin/generations/rebuild`: the build asked for (`GET /v1/generations` follows it)."""

    build_id: str
    state: str
    """`queued`: the builder's next step starts it."""


class GenerationActivated(msgspec.Struct, kw_only=True):
    """`POST /admin/generations/{id}/activate`: the generation served now."""

    id: str
    current: bool


class Generation(msgspec.Struct, kw_only=True):
    """A verified generation: a FAISS index built from the stored vectors of one space."""

    id: str
    space_id: str
    space: dict[str, Any] | None
    """The vector space's description (provider, model, dimension, ...)."""
    index_type: str
    count: int
    """Vectors it holds (for a caller who may read only some namespaces: theirs alone)."""
    state: str
    built_at: dt.datetime
    activated_at: dt.datetime | None
    deactivated_at: dt.datetime | None
    current: bool
    directory: str | UnsetType = UNSET
    """Administrators only, as the three below: its files' directory."""
    manifest_sha256: str | UnsetType = UNSET
    source_watermark: int | UnsetType = UNSET
    tombstone_watermark: int | UnsetType = UNSET

    def seen_by(self, *, admin: bool) -> Generation:
        """What a caller sees of it: one who is no administrator, what `recalld generations`
        prints (the files' path, their digest and the change watermarks stay with administrators)."""
        if admin:
            return self
        return msgspec.structs.replace(
            self, directory=UNSET, manifest_sha256=UNSET, source_watermark=UNSET, tombstone_watermark=UNSET
        )


class Build(msgspec.Struct, kw_only=True):
    """A generation build, recent or in progress."""

    id: str
    state: str
    """`queued`, `running`, `verified`, `failed`, ..."""
    reason: str
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    generation: str | None
    done: int | UnsetType = UNSET
    """Whole readers only, as `total`: the vectors added so far, of `total`."""
    total: int | UnsetType = UNSET
    error: str | UnsetType | None = UNSET
    """Administrators only."""

    def seen_by(self, *, admin: bool, whole_reader: bool) -> Build:
        """What a caller sees of it: the progress counts span every namespace, the error text may
        name any of them."""
        hidden: dict[str, UnsetType] = {}
        if not admin:
            hidden["error"] = UNSET
        if not whole_reader:
            hidden |= {"done": UNSET, "total": UNSET}
        return msgspec.structs.replace(self, **hidden)


class Serving(msgspec.Struct, kw_only=True):
    """Which generation this daemon serves (each daemon of a fleet serves a copy of its own)."""

    generation: str | None
    """None while it serves only vectors not in a generation yet."""
    files: Literal["builder", "copy"] | None
    """`builder`: the builder's files; `copy`: a copy built here from the stored vectors."""
    building: str | None
    """The generation whose copy is being built here."""


class Lag(msgspec.Struct, kw_only=True):
    behind: bool
    """The generation pointer names another generation than the one served."""
    seconds: float | None
    """Every vector stored longer ago than this is searchable here (None before the first time)."""
    vectors: int | None
    """Vectors stored but not taken in yet; None for a caller who may not read every namespace."""


class Generations(msgspec.Struct, kw_only=True):
    """`GET /v1/generations`: the vector index and how far behind PostgreSQL it is."""

    current: Generation | None
    previous: str | None
    """The rollback target: the generation that was current before."""
    generations: list[Generation]
    pending: int
    """Live records not searchable by the vector route yet (of `?namespace=` when given)."""
    builds: list[Build]
    serving: Serving
    lag: Lag
    pending_chunks: int | UnsetType = UNSET
    """With `?namespace=` only: that namespace's chunks still to embed."""
    index: dict[str, Any] | UnsetType = UNSET
    """Administrators only: the index manager's own state, for diagnosis (not a contract)."""
