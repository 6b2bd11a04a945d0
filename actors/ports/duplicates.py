"""The port of the duplicate check's stored title vectors (`recalld.store.duplicates` implements it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from recalld.actors.ports.embedding import VectorSpace


class TitleBacklog(Protocol):
    """The stored title vectors, keyed by the SHA-256 of the normalised title, per space.

    Its own port rather than a role of `VectorStore`: title vectors are the duplicate check's,
    and a daemon without it (or a test's in-memory store) indexes chunks as before."""

    async def ensure_space(self, space: VectorSpace) -> None:
        """Register the space before anything is stored in it; asked before every store, so once
        a space is registered, again is cheap (the store remembers it)."""
        ...

    async def titles_to_embed(self, space_id: str, limit: int, *, after: int = 0) -> list[tuple[str, str]]:
        """Distinct normalised titles of live records changed after change mark `after` that
        have no vector in the space, at most `limit`, each with one namespace that holds it
        (whose usage the embedding is metered to)."""
        ...

    async def store_titles(self, space_id: str, items: Sequence[tuple[str, npt.NDArray[np.float32]]]) -> int:
        """Store (title key, vector) items; a key already stored keeps its vector. Returns how
        many were new."""
        ...

    async def delete_orphan_titles(self, space_id: str) -> int:
        """Delete the vectors whose title no live record has any more (forgotten or retitled
        records): what someone forgot does not stay behind as a vector. How many went."""
        ...
