"""Titles embedded ahead of their duplicate check: while a record is written, its title is already
with the title model, so that the check's one slow step (2 ms a title alone, several times that
beside indexing) runs beside the write's PostgreSQL work rather than after it
(docs/DUPLICATES.md, "Cost per check").

The check then makes no embedding call of its own (one a check): the titles it finds with no
vector that this call did not carry wait for a later check or the index manager. A title another
create's call carries (`Carried`: concurrent writers', whose vectors are stored only after their
answers) is not embedded again: the check takes its vector from that call. Titles are
embedded ahead only when the check will need them as far as this daemon knows: a checked kind
that had live titles at its last check (nothing is, for the first title of a kind, nor for the
first check after a start), and an embedder ready to take them; with them, as the check's
catch-up would take them, the titles the kind's last read found with no vector.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
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


CARRIED = 4096
"""Titles `Carried` remembers: far more than concurrent writes hand to the title writer at once."""


class Carried:
    """The titles embedded ahead lately, by normalised title, with the call that carries each.

    Concurrent creates of one kind each find the others' titles with no stored vector: their
    vectors are stored after their answers. Without this, each check would embed those titles
    again with its own (2.5 titles a create at 4 writers, against 1 at one). The `capacity`
    most recent titles are kept; a title whose call failed or gave up is not carried."""

    def __init__(self, capacity: int = CARRIED) -> None:
        self._capacity = capacity
        self._by_norm: OrderedDict[str, Ahead] = OrderedDict()

    def add(self, ahead: Ahead) -> None:
        for norm in ahead.norms:
            self._by_norm[norm] = ahead
            self._by_norm.move_to_end(norm)
        while len(self._by_norm) > self._capacity:
            self._by_norm.popitem(last=False)

    def __contains__(self, norm: str) -> bool:
        ahead = self._by_norm.get(norm)
        return ahead is not None and ahead.error is None and (not ahead.done.is_set() or norm in ahead.vectors)

    def ready(self, space_id: str) -> Callable[[str], npt.NDArray[np.float32] | None]:
        """A title's vector in `space_id` where its call has ended (no waiting): for the titles
        that other checks' reads added meanwhile, written beside this one."""

        def vector(norm: str) -> npt.NDArray[np.float32] | None:
            ahead = self._by_norm.get(norm)
            if ahead is None or ahead.space is None or ahead.space.key != space_id:
                return None
            return ahead.vectors.get(norm)

        return vector

    async def vectors(self, norms: Iterable[str], space_id: str, until: float) -> dict[str, npt.NDArray[np.float32]]:
        """The vectors in `space_id` of those of `norms` carried, once their calls end (those
        still running at `until`, anyio's clock, are left out)."""
        take, found = self.ready(space_id), {}
        with anyio.move_on_after(until - anyio.current_time()):
            for norm in norms:
                if norm in self:
                    await self._by_norm[norm].done.wait()
                    if (vector := take(norm)) is not None:
                        found[norm] = vector
        return found


@asynccontextmanager
async def embedding_ahead(
    embedder: Embedder | None, namespace: str, norms: Sequence[str], deadline: float, carried: Carried
) -> AsyncIterator[Ahead | None]:
    """Embed `norms` (purpose `dedupe`, by `deadline`) while the block runs; leaving the block
    gives up on what is not done (a refused write checks nothing). None when there is nothing
    to embed. A failure is kept for the check, which is skipped with its reason. The call is
    `carried` from its start."""
    if embedder is None or not norms:
        yield None
        return
    ahead = Ahead(list(norms))
    carried.add(ahead)

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
    carried: Carried,
) -> AbstractAsyncContextManager[Ahead | None]:
    """The (kind, title)s of one namespace embedded ahead of their checks, in one call (None:
    none is, see the module's docstring); the titles waiting for a vector that another call
    carries are left to it."""
    titled = [(kind, title) for kind, title in titled if kind not in config.unchecked_kinds]
    kinds = list(dict.fromkeys(kind for kind, _ in titled))
    ready = embedder is not None and embedder.space is not None and embedder.breaker_state is BreakerState.CLOSED
    wanted: list[str] = []
    if embedder is not None and ready and any(live.last_count(namespace, kind) for kind in kinds):
        own = list(dict.fromkeys(title_text(title) for _, title in titled))
        waiting = [norm for kind in kinds for norm in live.waiting(namespace, kind) if norm not in carried]
        extra, _ = catch_up(waiting, set(own), config.catch_up_titles, embedder.settings.max_batch - len(own))
        wanted = [*own, *extra]
    return embedding_ahead(embedder, namespace, wanted, anyio.current_time() + config.time_cap_s, carried)


@asynccontextmanager
async def batch_ahead(
    live: LiveTitles,
    embedder: Embedder | None,
    config: DuplicatesConfig,
    items: Sequence[tuple[str, str, str]],
    carried: Carried,
) -> AsyncIterator[dict[str, Ahead]]:
    """A batch's (namespace, kind, title)s embedded ahead: one call per namespace."""
    by_namespace: dict[str, list[tuple[str, str]]] = {}
    for namespace, kind, title in items:
        by_namespace.setdefault(namespace, []).append((kind, title))
    async with AsyncExitStack() as stack:
        found = {}
        for namespace, titled in by_namespace.items():
            ahead = await stack.enter_async_context(titles_ahead(live, embedder, config, namespace, titled, carried))
            if ahead is not None:
                found[namespace] = ahead
        yield found
