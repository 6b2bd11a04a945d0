"""The supervision tree `assemble()` builds, for each `[embedding] provider` setting.

Housekeeping that does not depend on embedding (telemetry and dispute retention, stale holds,
crashed build directories) must run whatever the provider, `none` included; the vector actors
exist only with a provider.
"""

from __future__ import annotations

from pathlib import Path

import asyncpg
import httpx
import pytest

from recalld.assembly import assemble
from recalld.config import build
from recalld.metrics import Metrics
from recalld.providers.early import EarlyModels
from recalld.systemd import Notifier
from tests.support import scratch_dir

VECTOR_ACTORS = ["embedder", "index", "notifications"]
ALWAYS = ["watchdog", "searches", "sweeper", "assignments", "control"]

PROVIDERS = [
    ({"provider": "local"}, True),
    ({"provider": "ollama", "url": "http://127.0.0.1:9/api"}, True),
    ({"provider": "openai", "url": "http://127.0.0.1:9/v1"}, True),
    ({"provider": "none"}, False),
]

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(("embedding", "vector"), PROVIDERS, ids=[p[0]["provider"] for p in PROVIDERS])
async def test_supervision_tree_per_provider(pool: asyncpg.Pool, embedding: dict[str, str], vector: bool) -> None:
    config = build({"embedding": embedding}, environ={})
    async with httpx.AsyncClient() as http:
        daemon = assemble(
            config,
            pool=pool,
            dsn="postgresql:///unused",
            embedded=None,
            http=http,
            data_dir=Path(scratch_dir("recalld-test-assembly-")),
            metrics=Metrics(),
            notifier=Notifier(None),
            listeners=[],
            early=EarlyModels(recall=None, title=None),  # assembling loads no model
        )
    names = list(daemon.supervisor.status())
    for name in ALWAYS:
        assert name in names, f"{embedding['provider']}: {name} is not supervised ({names})"
    for name in VECTOR_ACTORS:
        assert (name in names) is vector, f"{embedding['provider']}: {name} supervised? {names}"
    # the sweeper starts after the index manager, whose leases it reads, and before control
    assert names.index("sweeper") < names.index("control")
    if vector:
        assert names.index("index") < names.index("sweeper")
