"""Canonical assignments over a daemon's socket: daemons ticking fast or never, new entities,
ties between two suppliers, and one characteristic's assignment."""

from __future__ import annotations

import uuid
from typing import Any

from tests.support import Daemon

FAST = {"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_ASSIGNMENTS_INTERVAL_S": "0.2"}
"""A daemon whose assignments tick every 0.2 s (no embedding provider: none is needed)."""

SLOW_TICKS = {"RECALLD_EMBEDDING_PROVIDER": "none", "RECALLD_ASSIGNMENTS_INTERVAL_S": "3600"}
"""A daemon whose assignments tick once an hour: within a test, observations stay unassigned."""


def entity() -> str:
    """An entity key no other test uses."""
    return "e-" + uuid.uuid4().hex[:8]


def tie(daemon: Daemon, key: str, characteristic: str, a: str, b: str) -> None:
    """Two suppliers of equal trust observe different values: a tie, which opens a dispute."""
    status, body = daemon.call(
        "POST",
        "/v1/observations",
        {
            "observations": [
                {"entity": key, "characteristic": characteristic, "supplier": "acme", "value": a, "trust": 0.5},
                {"entity": key, "characteristic": characteristic, "supplier": "globex", "value": b, "trust": 0.5},
            ]
        },
    )
    assert (status, body) == (202, {"accepted": 2, "stored": 2})


def assignment(daemon: Daemon, key: str, characteristic: str) -> dict[str, Any] | None:
    """The entity's assignment of `characteristic`, or None while it has none."""
    status, body = daemon.call("GET", f"/v1/assignments/{key}")
    if status != 200:
        return None
    return next((a for a in body["assignments"] if a["characteristic"] == characteristic), None)
