"""Titles embedded ahead of their duplicate check: while a record is written, its title is already
with the title model, so that the check's one slow step (2 ms a title alone, several times that
beside indexing) runs beside the write's PostgreSQL work rather than after it
(docs/DUPLICATES.md, "Cost per check").

The check then makes no embedding call of its own (one a check): the titles it finds with no
vector that this call did not carry wait for a later check or the index manager. Titles are
embedded ahead only when the check will need them as far as this daemon knows: a checked kind
that had live titles at its last check (nothing is, for the first title of a kind, nor for the
first check after a start), and an embedder ready to take them; with them, as the check's
catch-up would take them, the titles the kind's last read found with no vector.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import anyio
import numpy as np
import numpy.typing as npt

from recalld.actors.duplicates.rules import catch_up, title_text
from recalld.actors.embedding.embedder import Embedder
from recalld.actors.embedding.errors import EmbeddingError
from recalld.actors.kernel.breaker import BreakerState
from recalld.actors.ports.embedding import VectorSpace
from recalld.config import DuplicatesConfig
from recalld.services.duplicates_live import LiveTitles


@dataclass
class Ahead:
    """The titles of one namespace embedded ahead of their check, by normalised title."""

    norms: list[str]
    vectors: dict[str, npt.NDArray[np.float32]] = field(default_factory=dict)
    space: VectorSpace | None = None
    error: EmbeddingError | None = None
    """Why the embedding failed (the check is skipped for it: one embedding call a check)."""
    done: anyio.Event = field(default_factory=anyio.Event)

    async def known(self) -> tuple[dict[str, npt.NDArray[np.float32]], VectorSpace | None]:
        """The vectors and their space once the embedding ended; nothing when it failed."""
        await self.done.wait()
        return self.vectors, self.space


@asynccontextmanager
async def embedding_ahead(
    embedder: Embedder | None, namespace: str, norms: Sequence[str], deadline: float
) -> AsyncIterator[Ahead | None]:
    """Embed `norms` (purpose `dedupe`, by `deadline`) while the block runs; leaving the block
    gives up on what is not done (a refused write checks nothing). None when there is nothing
    to embed. A failure is kept for the check, which is skipped with its reason."""
    if embedder is None or not norms:
        yield None
        return
    ahead = Ahead(list(norms))

    async def embed() -> None:
        try:
            texts = [embedder.render_title(norm).text for norm in ahead.norms]
            result = await embedder.embed(texts, purpose="dedupe", namespace=namespace, deadline=deadline)
            ahead.vectors = dict(zip(ahead.norms, result.vectors, strict=True))
            ahead.space = result.space
        except EmbeddingError as error:
            ahead.error = error
        finally:
            ahead.done.set()

    failed: Exception | None = None
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(embed)
        try:
            yield ahead
        except Exception as error:  # raised past the task group, which would wrap it in a group
            failed = error
        finally:
            tasks.cancel_scope.cancel()
    if failed is not None:
        raise failed


def titles_ahead(
    live: LiveTitles,
    embedder: Embedder | None,
    config: DuplicatesConfig,
    namespace: str,
    titled: Sequence[tuple[str, str]],
) -> AbstractAsyncContextManager[Ahead | None]:
    """The (kind, title)s of one namespace embedded ahead of their checks, in one call (None:
    none is, see the module's docstring)."""
    titled = [(kind, title) for kind, title in titled if kind not in config.unchecked_kinds]
    kinds = list(dict.fromkeys(kind for kind, _ in titled))
    ready = embedder is not None and embedder.space is not None and embedder.breaker_state is BreakerState.CLOSED
    wanted: list[str] = []
    if embedder is not None and ready and any(live.last_count(namespace, kind) for kind in kinds):
        own = list(dict.fromkeys(title_text(title) for _, title in titled))
        waiting = [norm for kind in kinds for norm in live.waiting(namespace, kind)]
        extra, _ = catch_up(waiting, set(own), config.catch_up_titles, embedder.settings.max_batch - len(own))
        wanted = [*own, *extra]
    return embedding_ahead(embedder, namespace, wanted, anyio.current_time() + config.time_cap_s)


@asynccontextmanager
async def batch_ahead(
    live: LiveTitles, embedder: Embedder | None, config: DuplicatesConfig, items: Sequence[tuple[str, str, str]]
) -> AsyncIterator[dict[str, Ahead]]:
    """A batch's (namespace, kind, title)s embedded ahead: one call per namespace."""
    by_namespace: dict[str, list[tuple[str, str]]] = {}
    for namespace, kind, title in items:
        by_namespace.setdefault(namespace, []).append((kind, title))
    async with AsyncExitStack() as stack:
        found = {}
        for namespace, titled in by_namespace.items():
            ahead = await stack.enter_async_context(titles_ahead(live, embedder, config, namespace, titled))
            if ahead is not None:
                found[namespace] = ahead
        yield found
