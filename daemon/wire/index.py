"""The vector index's administration answers (`POST /admin/generations/...`)."""

from __future__ import annotations

import msgspec


class BuildStarted(msgspec.Struct, kw_only=True):
    """`POST /admin/generations/rebuild`: the build asked for (`GET /v1/generations` follows it)."""

    build_id: str
    state: str
    """`queued`: the builder's next step starts it."""


class GenerationActivated(msgspec.Struct, kw_only=True):
    """`POST /admin/generations/{id}/activate`: the generation served now."""

    id: str
    current: bool
