"""Title vectors (the builder only): embed and store, once per space, the normalised titles of
live records that have no vector yet, so that a semantic duplicate check (docs/DUPLICATES.md) costs one
embedding call, the new title's, however many records exist.

A model switch is a new space: every title is then embedded again, as every chunk is.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable

from recalld.actors.duplicates.rules import title_key
from recalld.actors.embedding.embedder import Embedder
from recalld.actors.embedding.errors import EmbeddingError
from recalld.actors.ports.duplicates import TitleBacklog

log = logging.getLogger("recalld.index")

TITLE_BATCH = 256
"""Titles read from the backlog at a time (short texts: a few provider calls' worth)."""


class TitleCatchUp:
    """Makes every live title comparable in a space.

    Guarantees: a title is embedded at most once per space while it is stored (its key is its
    normalised text's hash, shared by every record with that title); provider trouble ends the
    pass with what was stored kept, and the next step resumes. Embedding is metered as `index`
    work, per namespace. The space is the title embedder's own, which need not be the chunks'
    (the duplicate check may use a title model of its own, `[duplicates] model`).
    """

    def __init__(self, store: TitleBacklog, embedder: Embedder) -> None:
        self._store = store
        self._embedder = embedder
        self.embedded_titles = 0
        """Title vectors stored by this daemon since it started."""

    async def run(self, *, after: int = 0, holding: Callable[[], bool] = lambda: True) -> str | None:
        """Embed and store every missing title of live records changed after change mark
        `after`; the provider's trouble that ended the pass early, if any, as `reason: message`.
        A full pass (`after` 0) also deletes orphans. Nothing while the embedder has no space.
        `holding()` is asked before each provider call, as the chunks' catch-up asks it: once the
        builder lock is lost the pass ends, and the new holder embeds what is left (the call in
        flight when the lock went is the most embedded twice)."""
        space = self._embedder.space
        if space is None:
            return None
        await self._store.ensure_space(space)
        step = max(1, self._embedder.settings.max_batch)
        while True:
            backlog = await self._store.titles_to_embed(space.key, TITLE_BATCH, after=after)
            if not backlog:
                break
            by_namespace: dict[str, list[str]] = defaultdict(list)
            for title_norm, namespace in backlog:
                by_namespace[namespace].append(title_norm)
            for namespace, titles in by_namespace.items():
                for start in range(0, len(titles), step):
                    if not holding():
                        log.warning("the builder lock was lost: the title catch-up stops here")
                        return None
                    part = titles[start : start + step]
                    texts = [self._embedder.render_title(t).text for t in part]
                    try:
                        result = await self._embedder.embed(texts, purpose="index", namespace=namespace)
                    except EmbeddingError as error:
                        return f"{error.reason}: {error}"
                    if result.space.key != space.key:
                        return None  # the space changed under us; the next step starts over
                    items = [(title_key(t), result.vectors[i]) for i, t in enumerate(part)]
                    self.embedded_titles += await self._store.store_titles(space.key, items)
        if after == 0:
            gone = await self._store.delete_orphan_titles(space.key)
            if gone:
                log.debug("title vectors of titles no live record has deleted", extra={"count": gone})
        return None
