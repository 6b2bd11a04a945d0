"""An embedder actor running on the loopback embedding service, for the embedder's scheduling tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from recalld.actors.embedding.embedder import Embedder, EmbedderSettings
from recalld.actors.embedding.pace import Foreground
from recalld.providers.http import OpenAIProvider
from tests.support.embedding_service import EmbeddingService, serve
from tests.support.usage_sink import NoSink


@asynccontextmanager
async def slow_embedder(
    service: EmbeddingService, backend: str, unit: float, foreground: Foreground | None = None, **settings: Any
) -> AsyncIterator[Embedder]:
    """An embedder whose provider answers every call after one `unit` (sharing `foreground`)."""
    async with serve(service, backend) as (url, client):
        provider = OpenAIProvider(client, url=f"{url}/v1", model="text-embedding-3-small")
        values: dict[str, Any] = {"timeout_s": 100 * unit, "max_wait_s": 0.0, **settings}
        embedder = Embedder(provider, usage=NoSink(), settings=EmbedderSettings(**values), foreground=foreground)
        async with anyio.create_task_group() as tasks:
            await tasks.start(embedder.run)
            service.fault, service.slow_s = "slow", unit
            yield embedder
            tasks.cancel_scope.cancel()
