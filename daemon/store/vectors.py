"""The vector index's PostgreSQL side: chunks and surrogates, stored vectors, and (from
daemon/store/generations.py) the generations, the pointer and the copies.

Implements `recalld.actors.ports.index.VectorStore` (each of its roles). Only the holder of the builder lock writes chunks
and vectors, one record per transaction, so surrogates are committed in increasing order:
"every vector with a surrogate above W" is then an exact description of what a handle built up
to W is missing.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Collection, Sequence
from typing import Any

import asyncpg
import msgspec
import numpy as np

from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import BodyToIndex, Holds, RecordToIndex, VectorRows
from recalld.store import db
from recalld.store.generations import GENERATION_CHANNEL as GENERATION_CHANNEL  # LISTENed to by notifications
from recalld.store.generations import PgGenerationCatalogue

VECTORS_STORED = "vectors"
"""The payload of the NOTIFY (on `GENERATION_CHANNEL`) the builder sends when it stored vectors."""


# Live records whose current revision has no vectors in space $1 cut by chunker $2 yet.
_TO_INDEX = """FROM records r
    LEFT JOIN indexed_records i ON i.space_id = $1 AND i.record_id = r.id
    WHERE r.deleted_at IS NULL AND (i.record_id IS NULL OR i.revision <> r.revision OR i.chunker <> $2)
      AND NOT EXISTS (SELECT FROM index_holds h WHERE h.space_id = $1 AND h.record_id = r.id
                      AND h.revision = r.revision AND h.retry_at > now())"""


async def _count_to_index(
    conn: asyncpg.Connection, space_id: str, chunker: str, after: int = 0, namespaces: Collection[str] | None = None
) -> int:
    return int(
        await conn.fetchval(
            f"SELECT count(*) {_TO_INDEX} AND r.change_seq > $3 AND ($4::text[] IS NULL OR r.namespace = ANY($4))",
            space_id,
            chunker,
            after,
            _listed(namespaces),
        )
    )


def _listed(namespaces: Collection[str] | None) -> list[str] | None:
    """A namespace filter as a query parameter: NULL stands for every namespace."""
    return None if namespaces is None else list(namespaces)


def _rows(rows: list[asyncpg.Record], dimension: int) -> VectorRows:
    if not rows:
        return VectorRows.empty(dimension)
    vectors = np.frombuffer(b"".join(r["vector"] for r in rows), dtype="<f4").reshape(len(rows), dimension)
    return VectorRows(
        surrogates=np.fromiter((r["surrogate"] for r in rows), dtype=np.int64, count=len(rows)),
        record_ids=[r["record_id"] for r in rows],
        revisions=np.fromiter((r["revision"] for r in rows), dtype=np.int32, count=len(rows)),
        namespaces=[r["namespace"] for r in rows],
        vectors=vectors.astype(np.float32, copy=False),
    )


PLANNED_AS_THEY_GROW = ("indexed_records", "records")
"""The tables whose planner statistics the catch-up refreshes while a backlog is indexed, before
autovacuum's analyze gets there (by its defaults, up to a minute after each tenth of growth).
`indexed_records`: "which records still need vectors" joins it with records and, sized as it was
when last analysed, gets a nested loop that rescans it for every record (measured: one count
past a minute after 100,000 records were written at once). `records`: with no statistics full
text walks the namespace's index and tests every record's words instead of asking the words'
GIN index, a plan whose cost grows with the namespace's records (bench/recall_statistics.py:
0.6 -> 3.7 ms of PostgreSQL CPU per recall on 8,000 records)."""


class PgVectorStore(PgGenerationCatalogue):
    """Every role of `recalld.actors.ports.index.VectorStore` over one asyncpg pool (the
    generations' catalogue and the copies' records from `PgGenerationCatalogue`)."""

    async def ensure_space(self, space: VectorSpace) -> None:
        async with db.connection(self._pool) as conn:
            await conn.execute(
                "INSERT INTO vector_spaces (space_id, spec) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                space.key,
                msgspec.to_builtins(space),
            )

    async def spaces(self) -> dict[str, object]:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch("SELECT space_id, spec FROM vector_spaces")
        return {r["space_id"]: r["spec"] for r in rows}

    # -- what needs embedding

    async def records_to_index(self, space_id: str, chunker: str, limit: int, *, after: int = 0) -> list[RecordToIndex]:
        """Live records whose current revision has no vectors in `space_id` yet, in change order after `after`."""
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                f"""SELECT r.id, r.revision, r.namespace, r.title, r.body, r.change_seq
                   {_TO_INDEX} AND r.change_seq > $4
                   ORDER BY r.change_seq
                   LIMIT $3""",
                space_id,
                chunker,
                limit,
                after,
            )
        return [RecordToIndex(*row.values()) for row in rows]

    async def count_to_index(
        self, space_id: str, chunker: str, *, after: int = 0, namespaces: Collection[str] | None = None
    ) -> int:
        async with db.connection(self._pool) as conn:
            return await _count_to_index(conn, space_id, chunker, after, namespaces)

    async def bodies_to_index(
        self,
        space_id: str,
        chunker: str,
        *,
        namespaces: Collection[str],
        after: int = 0,
        known: Collection[tuple[uuid.UUID, int]] = (),
    ) -> list[BodyToIndex]:
        ids = [record_id for record_id, _ in known]
        revisions = [revision for _, revision in known]
        async with db.connection(self._pool) as conn:
            # A known revision's body is never read out (a body may be megabytes).
            rows = await conn.fetch(
                f"""SELECT p.id, p.revision, p.namespace, CASE WHEN k.record_id IS NULL THEN p.body END AS body
                   FROM (SELECT r.id, r.revision, r.namespace, r.body
                         {_TO_INDEX} AND r.change_seq > $3 AND r.namespace = ANY($4::text[])) AS p
                   LEFT JOIN unnest($5::uuid[], $6::int[]) AS k (record_id, revision)
                     ON k.record_id = p.id AND k.revision = p.revision""",
                space_id,
                chunker,
                after,
                list(namespaces),
                ids,
                revisions,
            )
        return [BodyToIndex(*row.values()) for row in rows]

    async def hold(
        self, space_id: str, holds: Sequence[tuple[uuid.UUID, int, str]], *, first_s: float, longest_s: float
    ) -> None:
        if not holds:
            return
        ids, revisions, reasons = (list(column) for column in zip(*holds, strict=True))
        async with db.connection(self._pool) as conn:
            # In DO UPDATE every h.* is the row before the update: `attempts` there counts the
            # earlier holds of this revision (a new revision starts over).
            await conn.execute(
                """INSERT INTO index_holds AS h (space_id, record_id, revision, reason, retry_at)
                   SELECT $1, k.record_id, k.revision, k.reason, now() + make_interval(secs => least($5::float8, $6::float8))
                   FROM unnest($2::uuid[], $3::int[], $4::text[]) AS k (record_id, revision, reason)
                   ON CONFLICT (space_id, record_id) DO UPDATE SET
                       attempts = CASE WHEN h.revision = EXCLUDED.revision THEN h.attempts + 1 ELSE 1 END,
                       retry_at = now() + make_interval(secs => least($6::float8, $5::float8 * power(2,
                           CASE WHEN h.revision = EXCLUDED.revision THEN h.attempts ELSE 0 END))),
                       revision = EXCLUDED.revision, reason = EXCLUDED.reason, held_at = now()""",
                space_id,
                ids,
                revisions,
                reasons,
                first_s,
                longest_s,
            )

    async def held(self, space_id: str, *, namespaces: Collection[str] | None = None) -> Holds:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                """SELECT h.reason, count(*) AS n, extract(epoch FROM min(h.retry_at) - now()) AS first_end_s
                   FROM index_holds h
                   JOIN records r ON r.id = h.record_id AND r.revision = h.revision AND r.deleted_at IS NULL
                   WHERE h.space_id = $1 AND h.retry_at > now() AND ($2::text[] IS NULL OR r.namespace = ANY($2))
                   GROUP BY h.reason ORDER BY h.reason""",
                space_id,
                _listed(namespaces),
            )
        return Holds(
            by_reason={row["reason"]: int(row["n"]) for row in rows},
            next_end_s=min((float(row["first_end_s"]) for row in rows), default=None),
        )

    async def delete_stale_holds(self) -> int:
        async with db.connection(self._pool) as conn:
            done = await conn.execute(
                """DELETE FROM index_holds h WHERE NOT EXISTS (
                       SELECT FROM records r WHERE r.id = h.record_id AND r.revision = h.revision
                         AND r.deleted_at IS NULL)"""
            )
        return int(done.split()[-1])

    async def refresh_statistics(self) -> None:
        async with db.connection(self._pool) as conn:
            await conn.execute(f"ANALYZE {', '.join(PLANNED_AS_THEY_GROW)}")

    async def change_mark(self) -> int | None:
        # Every record write takes the next change_seq. A write that took a lower one than the
        # newest committed can still commit only while its transaction is open, and an open
        # writing transaction holds the lock on its own transaction id. Only this database's
        # sessions count: a server shared with other applications always has some open.
        async with db.connection(self._pool) as conn:
            row = await conn.fetchrow(
                """SELECT coalesce((SELECT max(change_seq) FROM records), 0) AS mark,
                          NOT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                                      WHERE l.locktype = 'transactionid' AND l.pid <> pg_backend_pid()
                                        AND a.datname = current_database()) AS settled"""
            )
        assert row is not None
        return int(row["mark"]) if row["settled"] else None

    async def store_batch(self, space_id: str, chunker: str, items: Any) -> int:
        """Store records' chunks and vectors in one transaction, set-based; returns vectors stored.

        The record rows are share-locked first, so an update or forget either committed before
        (that record is skipped: its revision is no longer live) or waits for us (and then
        retires what we stored). A chunk that already exists for the same record revision and
        text (the same chunk, embedded for another space) keeps its surrogate.
        """
        if not items:
            return 0
        async with db.connection(self._pool) as conn, db.transaction(conn):
            live = {
                r["id"]: r["revision"]
                for r in await conn.fetch(
                    "SELECT id, revision FROM records WHERE id = ANY($1::uuid[]) AND deleted_at IS NULL "
                    "ORDER BY id FOR SHARE",
                    [record.id for record, *_ in items],
                )
            }
            kept = [item for item in items if live.get(item[0].id) == item[0].revision]
            if not kept:
                return 0
            existing = {
                (r["record_id"], r["chunk_no"]): (r["surrogate"], r["text_sha256"])
                for r in await conn.fetch(
                    """SELECT c.record_id, c.chunk_no, c.surrogate, c.text_sha256 FROM chunks c
                       JOIN unnest($1::uuid[], $2::int[]) AS k (record_id, revision)
                         ON k.record_id = c.record_id AND k.revision = c.revision
                       WHERE c.chunker = $3""",
                    [record.id for record, *_ in kept],
                    [record.revision for record, *_ in kept],
                    chunker,
                )
            }
            fresh: list[tuple[uuid.UUID, int, int, str, str, str]] = []
            for record, texts, hashes, _ in kept:
                for number, (text, digest) in enumerate(zip(texts, hashes, strict=True)):
                    if existing.get((record.id, number), (None, None))[1] != digest:
                        fresh.append((record.id, record.revision, number, record.namespace, text, digest))
            if fresh:
                columns = list(zip(*fresh, strict=True))
                for r in await conn.fetch(
                    """INSERT INTO chunks (record_id, revision, chunker, chunk_no, namespace, text, text_sha256)
                       SELECT k.record_id, k.revision, $7, k.chunk_no, k.namespace, k.text, k.digest
                       FROM unnest($1::uuid[], $2::int[], $3::int[], $4::text[], $5::text[], $6::text[])
                            WITH ORDINALITY AS k (record_id, revision, chunk_no, namespace, text, digest, n)
                       ORDER BY k.n
                       RETURNING record_id, chunk_no, surrogate, text_sha256""",
                    *columns,
                    chunker,
                ):
                    existing[(r["record_id"], r["chunk_no"])] = (r["surrogate"], r["text_sha256"])
            surrogates: list[int] = []
            blobs: list[bytes] = []
            for record, texts, _, vectors in kept:
                matrix = np.ascontiguousarray(vectors, dtype="<f4")
                for number in range(len(texts)):
                    surrogates.append(existing[(record.id, number)][0])
                    blobs.append(matrix[number].tobytes())
            await conn.execute(
                """INSERT INTO chunk_vectors (space_id, surrogate, vector)
                   SELECT $1, k.surrogate, k.vector FROM unnest($2::bigint[], $3::bytea[]) AS k (surrogate, vector)
                   ON CONFLICT DO NOTHING""",
                space_id,
                surrogates,
                blobs,
            )
            await conn.execute(
                "DELETE FROM index_holds WHERE space_id = $1 AND record_id = ANY($2::uuid[])",
                space_id,
                [record.id for record, *_ in kept],
            )
            # Delivered at commit: the other daemons take the new vectors in now, not at their next poll.
            await conn.execute("SELECT pg_notify($1, $2)", GENERATION_CHANNEL, VECTORS_STORED)
            await conn.execute(
                """INSERT INTO indexed_records (space_id, record_id, revision, chunker)
                   SELECT $1, k.record_id, k.revision, $4 FROM unnest($2::uuid[], $3::int[]) AS k (record_id, revision)
                   ON CONFLICT (space_id, record_id) DO UPDATE SET revision = EXCLUDED.revision, chunker = EXCLUDED.chunker""",
                space_id,
                [record.id for record, *_ in kept],
                [record.revision for record, *_ in kept],
                chunker,
            )
        return len(surrogates)

    # -- what a handle is missing

    async def vectors_after(self, space_id: str, dimension: int, after: int, limit: int) -> VectorRows:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                """SELECT c.surrogate, c.record_id, c.revision, c.namespace, v.vector
                   FROM chunk_vectors v JOIN chunks c ON c.surrogate = v.surrogate
                   WHERE v.space_id = $1 AND v.surrogate > $2 AND c.retired_at IS NULL
                   ORDER BY v.surrogate LIMIT $3""",
                space_id,
                after,
                limit,
            )
        return _rows(rows, dimension)

    async def newest_live_surrogate(self, space_id: str, *, namespaces: Collection[str] | None = None) -> int:
        # Retired chunks are skipped like vectors_after skips them: a handle never loads them, so
        # counting them would leave a forgotten newest record "pending" forever after a restart.
        async with db.connection(self._pool) as conn:
            value = await conn.fetchval(
                """SELECT v.surrogate FROM chunk_vectors v JOIN chunks c ON c.surrogate = v.surrogate
                   WHERE v.space_id = $1 AND c.retired_at IS NULL AND ($2::text[] IS NULL OR c.namespace = ANY($2))
                   ORDER BY v.surrogate DESC LIMIT 1""",
                space_id,
                _listed(namespaces),
            )
        return int(value or 0)

    async def retired_surrogates(self, up_to: int) -> np.ndarray:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                "SELECT surrogate FROM chunks WHERE retired_at IS NOT NULL AND surrogate <= $1", up_to
            )
        return np.fromiter((r["surrogate"] for r in rows), dtype=np.int64, count=len(rows))

    async def count_vectors_after(self, space_id: str, after: int) -> int:
        async with db.connection(self._pool) as conn:
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM chunk_vectors WHERE space_id = $1 AND surrogate > $2", space_id, after
                )
            )

    async def retired_chunks(self, retired_before: dt.datetime, *, after: int, limit: int) -> np.ndarray:
        async with db.connection(self._pool) as conn:
            rows = await conn.fetch(
                """SELECT surrogate FROM chunks WHERE retired_at IS NOT NULL AND retired_at < $1 AND surrogate > $2
                   ORDER BY surrogate LIMIT $3""",
                retired_before,
                after,
                limit,
            )
        return np.fromiter((r["surrogate"] for r in rows), dtype=np.int64, count=len(rows))

    async def delete_retired_chunks(self, surrogates: Sequence[int], retired_before: dt.datetime) -> int:
        if not len(surrogates):
            return 0
        async with db.connection(self._pool) as conn:
            done = await conn.execute(
                "DELETE FROM chunks WHERE surrogate = ANY($1::bigint[]) AND retired_at IS NOT NULL AND retired_at < $2",
                [int(s) for s in surrogates],
                retired_before,
            )
        return int(done.split()[-1])

    async def build_snapshot(self, space_id: str, chunker: str, dimension: int) -> tuple[VectorRows, int, int, int]:
        """Everything a new generation holds, read in one snapshot.

        Returns (rows, source watermark, tombstone watermark, records still to index): a build
        is only worth making when the last figure is 0.
        """
        async with db.connection(self._pool) as conn, db.transaction(conn, isolation="repeatable_read", readonly=True):
            rows = await conn.fetch(
                """SELECT c.surrogate, c.record_id, c.revision, c.namespace, v.vector
                   FROM chunk_vectors v JOIN chunks c ON c.surrogate = v.surrogate
                   WHERE v.space_id = $1 AND c.chunker = $2 AND c.retired_at IS NULL
                   ORDER BY v.surrogate""",
                space_id,
                chunker,
            )
            source = await conn.fetchval(
                "SELECT coalesce(max(surrogate), 0) FROM chunk_vectors WHERE space_id = $1", space_id
            )
            tombstone = await conn.fetchval("SELECT coalesce(max(change_seq), 0) FROM records")
            missing = await _count_to_index(conn, space_id, chunker)
        return _rows(rows, dimension), int(source), int(tombstone), int(missing)

    async def copy_snapshot(self, space_id: str, chunker: str, dimension: int, up_to: int) -> VectorRows:
        """What a daemon's own copy of a generation holds, read in one snapshot: the live chunks
        of its space and chunker stored up to its source watermark. Chunks retired since the
        builder's snapshot are not among them (their vectors are deleted when they retire)."""
        async with db.connection(self._pool) as conn, db.transaction(conn, isolation="repeatable_read", readonly=True):
            rows = await conn.fetch(
                """SELECT c.surrogate, c.record_id, c.revision, c.namespace, v.vector
                   FROM chunk_vectors v JOIN chunks c ON c.surrogate = v.surrogate
                   WHERE v.space_id = $1 AND v.surrogate <= $3 AND c.chunker = $2 AND c.retired_at IS NULL
                   ORDER BY v.surrogate""",
                space_id,
                chunker,
                up_to,
            )
        return _rows(rows, dimension)
