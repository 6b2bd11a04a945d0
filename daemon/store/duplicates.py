"""Title vectors in PostgreSQL (migration 0010) and the reads of the semantic duplicate check.

Implements `recalld.actors.ports.duplicates.TitleBacklog` for the index manager's catch-up, and what
`daemon/services/duplicates.py` reads: the live titles of a namespace and kind, and stored vectors by key.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence

import asyncpg
import numpy as np
import numpy.typing as npt

from recalld.actors.ports.embedding import VectorSpace
from recalld.store import db
from recalld.store.vectors import PgVectorStore

# The key of a record's normalised title, as `recalld.actors.duplicates.rules.title_key` computes it.
_TITLE_KEY = "encode(sha256(convert_to(r.title_norm, 'UTF8')), 'hex')"


class PgTitleStore:
    """Title vectors keyed by (space, SHA-256 of the normalised title), over one asyncpg pool.

    `unchecked_kinds` (`[duplicates] unchecked_kinds`): records of these kinds are never
    compared, so their titles are not embedded for the check, nor listed for an audit."""

    def __init__(self, pool: asyncpg.Pool, *, unchecked_kinds: Collection[str] = ()) -> None:
        self._pool = pool
        self._unchecked = sorted(unchecked_kinds)
        self._registered: set[str] = set()
        """Spaces this store registered: the checks' writer and the catch-up ask before every store."""

    # -- the index manager's catch-up (TitleBacklog)

    async def ensure_space(self, space: VectorSpace) -> None:
        if space.key not in self._registered:
            await PgVectorStore(self._pool).ensure_space(space)
            self._registered.add(space.key)

    async def titles_to_embed(self, space_id: str, limit: int, *, after: int = 0) -> list[tuple[str, str]]:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                f"""SELECT r.title_norm, min(r.namespace) AS namespace FROM records r
                    WHERE r.deleted_at IS NULL AND r.change_seq > $3 AND r.title_norm <> ''
                      AND r.kind <> ALL($4::text[])
                      AND NOT EXISTS (SELECT FROM title_vectors t
                                      WHERE t.space_id = $1 AND t.title_sha256 = {_TITLE_KEY})
                    GROUP BY r.title_norm ORDER BY r.title_norm LIMIT $2""",
                space_id,
                limit,
                after,
                self._unchecked,
            )
        return [(r["title_norm"], r["namespace"]) for r in rows]

    async def store_titles(self, space_id: str, items: Sequence[tuple[str, npt.NDArray[np.float32]]]) -> int:
        if not items:
            return 0
        # In one order, the keys': writers storing overlapping titles at once (the index manager,
        # duplicate checks catching up) would otherwise wait on each other's rows and deadlock.
        ordered = sorted(items, key=lambda item: item[0])
        keys = [key for key, _ in ordered]
        vectors = [np.asarray(vector, dtype="<f4").tobytes() for _, vector in ordered]
        async with db.connection(self._pool) as conn:
            stored = await conn.fetchval(
                """WITH added AS (
                       INSERT INTO title_vectors (space_id, title_sha256, vector)
                       SELECT $1, k.key, k.vector FROM unnest($2::text[], $3::bytea[]) AS k (key, vector)
                       ON CONFLICT DO NOTHING RETURNING 1)
                   SELECT count(*) FROM added""",
                space_id,
                keys,
                vectors,
            )
        return int(stored)

    async def delete_orphan_titles(self, space_id: str) -> int:
        async with db.connection(self._pool) as conn:
            done = await conn.execute(
                f"""DELETE FROM title_vectors t WHERE t.space_id = $1 AND NOT EXISTS (
                        SELECT FROM records r WHERE r.deleted_at IS NULL AND {_TITLE_KEY} = t.title_sha256)""",
                space_id,
            )
        return int(done.split()[-1])

    # -- the duplicate check

    async def change_mark(self) -> int | None:
        """The newest committed record change, or None while an older one may still commit
        (`IndexBacklog.change_mark`, the same rule)."""
        return await PgVectorStore(self._pool).change_mark()

    async def kind_titles(self, namespace: str, kind: str) -> list[tuple[uuid.UUID, str]]:
        """(id, normalised title) of every live record of the namespace and kind, the least
        recently changed first (a check embeds the newest titles that have no vector yet)."""
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                """SELECT id, title_norm FROM records WHERE namespace = $1 AND kind = $2 AND deleted_at IS NULL
                   ORDER BY change_seq""",
                namespace,
                kind,
            )
        return [(r[0], r[1]) for r in rows]

    async def title_changes(self, namespace: str, after: int) -> list[tuple[uuid.UUID, str, str, bool]]:
        """(id, kind, normalised title, live) of the namespace's records changed above `after`,
        in the order of their changes."""
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                """SELECT id, kind, title_norm, deleted_at IS NULL FROM records
                   WHERE change_seq > $2 AND namespace = $1 ORDER BY change_seq""",
                namespace,
                after,
            )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def namespace_titles(self, namespace: str, kind: str | None) -> list[tuple[uuid.UUID, str, str]]:
        """(id, kind, normalised title) of every live record of the namespace (of one kind when
        `kind` is given), in id order, records of unchecked kinds left out: what an audit
        compares."""
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                """SELECT id, kind, title_norm FROM records
                   WHERE namespace = $1 AND ($2::text IS NULL OR kind = $2) AND deleted_at IS NULL
                     AND kind <> ALL($3::text[])
                   ORDER BY id""",
                namespace,
                kind,
                self._unchecked,
            )
        return [(r["id"], r["kind"], r["title_norm"]) for r in rows]

    async def count_unchecked(self, namespace: str, kind: str | None) -> int:
        """Live records of the namespace (of one kind when `kind` is given) whose kind is
        unchecked: what an audit leaves out."""
        if not self._unchecked:
            return 0
        async with db.connection(self._pool) as conn:
            count = await conn.fetchval(
                """SELECT count(*) FROM records
                   WHERE namespace = $1 AND ($2::text IS NULL OR kind = $2) AND deleted_at IS NULL
                     AND kind = ANY($3::text[])""",
                namespace,
                kind,
                self._unchecked,
            )
        return int(count)

    async def vectors(self, space_id: str, keys: Sequence[str], dimension: int) -> dict[str, npt.NDArray[np.float32]]:
        """The stored vectors of these title keys in the space (keys without one are absent)."""
        if not keys:
            return {}
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                "SELECT title_sha256, vector FROM title_vectors WHERE space_id = $1 AND title_sha256 = ANY($2::text[])",
                space_id,
                list(keys),
            )
        return {r["title_sha256"]: np.frombuffer(r["vector"], dtype="<f4", count=dimension) for r in rows}

    async def titles(self, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
        """The current titles of these live records (a record forgotten meanwhile is absent)."""
        if not ids:
            return {}
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                "SELECT id, title FROM records WHERE id = ANY($1::uuid[]) AND deleted_at IS NULL", list(ids)
            )
        return {r["id"]: r["title"] for r in rows}
