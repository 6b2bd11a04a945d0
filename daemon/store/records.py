"""Records in PostgreSQL: create, read, update (a new revision) and forget (a tombstone).

Every write is one statement or one transaction, so a failed request leaves nothing behind.
Uniqueness (exact duplicates, ids, one live record per `source_path`) is enforced by the
database, not by a read-then-write check, so two concurrent creates of the same title, or of
the same source path, cannot both succeed.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from recalld.actors.records import content_hash, normalise_title
from recalld.store import db

_COLUMNS = "id, namespace, kind, title, body, attributes, source_path, revision, content_hash, created_at, updated_at"


@dataclass(frozen=True)
class RecordFields:
    namespace: str
    kind: str
    title: str
    body: str
    attributes: dict[str, Any]
    source_path: str | None

    @property
    def title_norm(self) -> str:
        return normalise_title(self.title)

    @property
    def content_hash(self) -> str:
        return content_hash(
            kind=self.kind,
            title=self.title,
            body=self.body,
            attributes=self.attributes,
            source_path=self.source_path,
        )


class ExactDuplicate(Exception):
    """A live record of the same namespace and kind already has this normalised title."""

    def __init__(self, existing_id: uuid.UUID) -> None:
        super().__init__(f"a record with the same title exists: {existing_id}")
        self.existing_id = existing_id


class SourcePathTaken(Exception):
    """A live record of the same namespace already has this `source_path`."""

    def __init__(self, existing_id: uuid.UUID) -> None:
        super().__init__(f"a record with the same source_path exists: {existing_id}")
        self.existing_id = existing_id


class IdTaken(Exception):
    """The client-chosen id belongs to an existing (possibly forgotten) record."""


class NamespaceChange(Exception):
    """An update tried to move a record to another namespace."""


# The unique index of live records' paths (migration `one_live_record_per_source_path`): a
# violation of it names the holder of the path; one of `records_live_title`, of the title.
LIVE_SOURCE_PATH_INDEX = "records_live_source_path"

# What a forget clears from the tombstone (the full-text `search` column follows on its own).
# Migration 0008 cleared the tombstones made before it with the same assignments.
FORGOTTEN_CONTENT = "title = '', title_norm = '', body = '', attributes = '{}', source_path = NULL, content_hash = ''"

# Wakes the index manager of every daemon sharing this database (payload: the record id).
RECORDS_CHANNEL = "recalld_records"


# What a retired chunk keeps: its surrogate row, the tombstone that keeps generations built before
# the change from returning it (the sweeper deletes the row once no generation on disk holds it).
# Its text, the text's hash, its full-text vector (generated from the text) and its stored vectors
# go: vectors can be partly inverted back to text, and nothing reads a retired chunk's vectors
# (deltas and builds take live chunks only; an earlier generation has its own in its file).
_RETIRE_CHUNKS = """WITH retired AS (
        UPDATE chunks SET retired_at = now(), text = '', text_sha256 = ''
        WHERE record_id = $1 AND retired_at IS NULL RETURNING surrogate)
    DELETE FROM chunk_vectors v USING retired r WHERE v.surrogate = r.surrogate"""


async def _changed(conn: asyncpg.Connection, record_id: uuid.UUID, *, retire_chunks: bool) -> None:
    """In the writing transaction: retire the older chunks and purge them, tell the indexers.

    Retiring here, atomically with the change, is what lets a forget take effect for the vector
    route at once, and what leaves nothing of the forgotten or replaced text (`_RETIRE_CHUNKS`)
    in PostgreSQL once the change commits.
    """
    if retire_chunks:
        await conn.execute(_RETIRE_CHUNKS, record_id)
    await conn.execute("SELECT pg_notify($1, $2)", RECORDS_CHANNEL, str(record_id))


class RecordRepository:
    """The canonical records, read and written over one asyncpg pool.

    Guarantees: each write is atomic (nothing half-written on any error); a live record's
    normalised title is unique in its namespace and kind (`ExactDuplicate` names the holder),
    and its `source_path` in its namespace (`SourcePathTaken` names the holder);
    an update or a forget retires the record's chunks and purges their text and vectors in the
    same transaction, and tells the indexers (NOTIFY) when it commits; a forgotten record keeps
    its id, namespace, kind and revision only (`FORGOTTEN_CONTENT`), and no read returns it.
    """

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _existing_title(self, conn: asyncpg.Connection, fields: RecordFields) -> uuid.UUID | None:
        found = await conn.fetchval(
            "SELECT id FROM records WHERE namespace = $1 AND kind = $2 AND title_norm = $3 AND deleted_at IS NULL",
            fields.namespace,
            fields.kind,
            fields.title_norm,
        )
        return found if isinstance(found, uuid.UUID) else None

    async def _existing_source(self, conn: asyncpg.Connection, fields: RecordFields) -> uuid.UUID | None:
        found = await conn.fetchval(
            "SELECT id FROM records WHERE namespace = $1 AND source_path = $2 AND deleted_at IS NULL",
            fields.namespace,
            fields.source_path,
        )
        return found if isinstance(found, uuid.UUID) else None

    async def _holder(
        self, conn: asyncpg.Connection, exc: asyncpg.UniqueViolationError, fields: RecordFields
    ) -> Exception | None:
        """What a unique violation of a live record's index says: the holder of the title or of
        the source path, or None when the holder was forgotten a moment ago (free again)."""
        if exc.constraint_name == LIVE_SOURCE_PATH_INDEX:
            holder = await self._existing_source(conn, fields)
            return SourcePathTaken(holder) if holder is not None else None
        holder = await self._existing_title(conn, fields)
        return ExactDuplicate(holder) if holder is not None else None

    async def create(self, fields: RecordFields, record_id: uuid.UUID | None = None) -> tuple[uuid.UUID, int]:
        """Insert revision 1; raise ExactDuplicate, SourcePathTaken or IdTaken instead of writing
        anything."""
        new_id = record_id or uuid.uuid4()
        async with db.connection(self._pool) as conn:
            try:
                async with db.transaction(conn):
                    await self._insert(conn, new_id, fields)
                    await _changed(conn, new_id, retire_chunks=False)
            except asyncpg.UniqueViolationError as exc:
                if exc.constraint_name == "records_pkey":
                    raise IdTaken(str(new_id)) from exc
                taken = await self._holder(conn, exc, fields)
                if taken is None:  # the twin was forgotten a moment ago: the title or path is free again
                    return await self.create(fields, record_id)
                raise taken from exc
        return new_id, 1

    async def _insert(self, conn: asyncpg.Connection, new_id: uuid.UUID, fields: RecordFields) -> None:
        await conn.execute(
            """INSERT INTO records (id, namespace, kind, title, title_norm, body, attributes,
                                            source_path, content_hash)
                       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)""",
            new_id,
            fields.namespace,
            fields.kind,
            fields.title,
            fields.title_norm,
            fields.body,
            fields.attributes,
            fields.source_path,
            fields.content_hash,
        )

    async def get(self, record_id: uuid.UUID) -> asyncpg.Record | None:
        """The live record, or None when it does not exist or was forgotten."""
        async with db.connection(self._pool) as conn:
            row: asyncpg.Record | None = await conn.fetchrow(
                f"SELECT {_COLUMNS} FROM records WHERE id = $1 AND deleted_at IS NULL", record_id
            )
            return row

    async def update(self, record_id: uuid.UUID, fields: RecordFields) -> tuple[int, bool] | None:
        """Write a new revision; return (revision, changed), or None when there is no live record.
        Raise ExactDuplicate or SourcePathTaken when another live record holds the new title or
        source path.

        An update that changes nothing keeps the revision (re-ingesting an unchanged file is a
        no-op). Moving a record to another namespace is refused: namespaces are access
        boundaries, so a move is a forget plus a create, made explicitly by the client.
        """
        async with db.connection(self._pool) as conn, db.transaction(conn):
            current = await conn.fetchrow(
                "SELECT namespace, revision, content_hash FROM records WHERE id = $1 AND deleted_at IS NULL FOR UPDATE",
                record_id,
            )
            if current is None:
                return None
            if current["namespace"] != fields.namespace:
                raise NamespaceChange(current["namespace"])
            if current["content_hash"] == fields.content_hash:
                return int(current["revision"]), False
            try:
                async with db.transaction(conn):  # a savepoint, so a duplicate leaves the row locked but intact
                    revision = await conn.fetchval(
                        """UPDATE records SET kind = $2, title = $3, title_norm = $4, body = $5,
                                  attributes = $6, source_path = $7, content_hash = $8,
                                  revision = revision + 1, updated_at = now(),
                                  change_seq = nextval('record_change_seq')
                           WHERE id = $1 RETURNING revision""",
                        record_id,
                        fields.kind,
                        fields.title,
                        fields.title_norm,
                        fields.body,
                        fields.attributes,
                        fields.source_path,
                        fields.content_hash,
                    )
            except asyncpg.UniqueViolationError as exc:
                taken = await self._holder(conn, exc, fields)
                if taken is None:  # the holder was forgotten meanwhile; the caller may try again
                    taken = ExactDuplicate(record_id)
                raise taken from exc
            await _changed(conn, record_id, retire_chunks=True)
            return int(revision), True

    async def forget(self, record_id: uuid.UUID) -> bool:
        """Tombstone the record; False when there was no live record to forget.

        The row stays, so that its id is never taken again and every index learns of the
        forget; what it said goes (`FORGOTTEN_CONTENT`): nothing can read it any more, and
        text someone chose to forget should not stay behind in the database."""
        async with db.connection(self._pool) as conn, db.transaction(conn):
            done = await conn.fetchval(
                "UPDATE records SET deleted_at = now(), updated_at = now(), "
                f"change_seq = nextval('record_change_seq'), {FORGOTTEN_CONTENT} "
                "WHERE id = $1 AND deleted_at IS NULL RETURNING id",
                record_id,
            )
            if done is None:
                return False
            await _changed(conn, record_id, retire_chunks=True)
            return True

    async def by_source(self, namespace: str, source_path: str) -> list[asyncpg.Record]:
        async with db.connection(self._pool) as conn:
            rows: list[asyncpg.Record] = await conn.fetch(
                f"SELECT {_COLUMNS} FROM records WHERE namespace = $1 AND source_path = $2 "
                "AND deleted_at IS NULL ORDER BY created_at",
                namespace,
                source_path,
            )
            return rows

    async def list(self, namespace: str, *, limit: int, after: uuid.UUID | None) -> list[asyncpg.Record]:
        """Live records of a namespace in id order, `limit` at a time (keyset paging)."""
        async with db.connection(self._pool) as conn:
            rows: list[asyncpg.Record] = await conn.fetch(
                f"SELECT {_COLUMNS} FROM records WHERE namespace = $1 AND deleted_at IS NULL "
                "AND ($2::uuid IS NULL OR id > $2) ORDER BY id LIMIT $3",
                namespace,
                after,
                limit,
            )
            return rows
