"""The generations' catalogue in PostgreSQL: verified generations, the pointer to the current one
(compare-and-swap), and the copies daemons built of them from the stored vectors.

Implements the `GenerationCatalogue` port and the recording half of `CopySource`
(`recalld.actors.ports.index`); `PgVectorStore` (daemon/store/vectors.py) takes them from here.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from recalld.actors.ports.index import GenerationCopy, GenerationRow, Pointer
from recalld.store import db

GENERATION_CHANNEL = "recalld_generation"
"""NOTIFY channel of the vector index: the pointer moved (payload: the generation id), or the
builder stored vectors (payload: `vectors`). Every daemon listening wakes its index manager."""


def _generation(row: asyncpg.Record | None) -> GenerationRow | None:
    if row is None:
        return None
    return GenerationRow(**{field: row[field] for field in GenerationRow.__struct_fields__})


_GENERATION_COLUMNS = ", ".join(GenerationRow.__struct_fields__)


class PgGenerationCatalogue:
    """Generations, the pointer and the copies over one asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def add_copy(self, copy: GenerationCopy) -> None:
        async with db.connection(self._pool) as conn:
            await conn.execute(
                """INSERT INTO generation_copies (generation_id, manifest_sha256, count, member, built_at)
                   VALUES ($1, $2, $3, $4, $5)""",
                copy.generation_id,
                copy.manifest_sha256,
                copy.count,
                copy.member,
                copy.built_at,
            )

    async def copies(self, generation_id: str) -> list[GenerationCopy]:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                """SELECT generation_id, manifest_sha256, count, member, built_at FROM generation_copies
                   WHERE generation_id = $1 ORDER BY built_at, manifest_sha256""",
                generation_id,
            )
        return [GenerationCopy(**dict(row)) for row in rows]

    async def pointer(self) -> Pointer:
        async with db.connection(self._pool) as conn:
            row = await conn.fetchrow("SELECT current, previous, version FROM generation_pointer")
            current = None
            if row["current"] is not None:
                current = _generation(
                    await conn.fetchrow(f"SELECT {_GENERATION_COLUMNS} FROM generations WHERE id = $1", row["current"])
                )
        return Pointer(current=current, previous=row["previous"], version=int(row["version"]))

    async def generation(self, generation_id: str) -> GenerationRow | None:
        async with db.connection(self._pool) as conn:
            return _generation(
                await conn.fetchrow(f"SELECT {_GENERATION_COLUMNS} FROM generations WHERE id = $1", generation_id)
            )

    async def generations(self) -> list[GenerationRow]:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(f"SELECT {_GENERATION_COLUMNS} FROM generations ORDER BY built_at DESC, id")
        return [g for g in map(_generation, rows) if g is not None]

    async def add_generation(self, row: GenerationRow) -> None:
        async with db.connection(self._pool) as conn:
            await conn.execute(
                f"INSERT INTO generations ({_GENERATION_COLUMNS}) "
                f"VALUES ({', '.join(f'${i + 1}' for i in range(len(GenerationRow.__struct_fields__)))})",
                *(getattr(row, f) for f in GenerationRow.__struct_fields__),
            )

    async def move_pointer(self, generation_id: str, expected_version: int) -> bool:
        """Compare-and-swap: make `generation_id` current if nobody moved the pointer since."""
        async with db.connection(self._pool) as conn, db.transaction(conn):
            moved = await conn.fetchval(
                """UPDATE generation_pointer
                   SET previous = CASE WHEN current = $1 THEN previous ELSE current END,
                       current = $1, version = version + 1, moved_at = now()
                   WHERE version = $2 RETURNING version""",
                generation_id,
                expected_version,
            )
            if moved is None:
                return False
            await conn.execute(
                "UPDATE generations SET deactivated_at = now() WHERE id <> $1 AND deactivated_at IS NULL AND activated_at IS NOT NULL",
                generation_id,
            )
            await conn.execute(
                "UPDATE generations SET activated_at = now(), deactivated_at = NULL WHERE id = $1",
                generation_id,
            )
            await conn.execute("SELECT pg_notify($1, $2)", GENERATION_CHANNEL, generation_id)
        return True

    async def retire_generation(self, generation_id: str, fence: Any) -> bool:
        """Mark a generation deleted, fenced: never the current one, and only if
        `fence(row, current, previous)` still holds with the pointer locked.

        The caller removes the directory after this commits, so a crash in between leaves an
        unreferenced directory, never a row that names a missing one.
        """
        async with db.connection(self._pool) as conn, db.transaction(conn):
            pointer = await conn.fetchrow("SELECT current, previous FROM generation_pointer FOR UPDATE")
            if generation_id == pointer["current"]:
                return False
            row = _generation(
                await conn.fetchrow(
                    f"SELECT {_GENERATION_COLUMNS} FROM generations WHERE id = $1 AND state = 'verified' FOR UPDATE",
                    generation_id,
                )
            )
            if row is None or not fence(row, pointer["current"], pointer["previous"]):
                return False
            await conn.execute("UPDATE generations SET state = 'deleted' WHERE id = $1", generation_id)
        return True
