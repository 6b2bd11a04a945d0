"""The daemon's stored chunk vectors of a namespace, read back from its PostgreSQL: what the raw
parts and the competitors are given, so that every system searches the same vectors."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import asyncpg
import numpy as np

from bench.lib.corpus import NAMESPACE

STORED_CHUNKS_SQL = """SELECT c.surrogate, c.record_id, c.text, v.vector
    FROM chunks c JOIN records r ON r.id = c.record_id AND r.revision = c.revision
    JOIN chunk_vectors v ON v.surrogate = c.surrogate AND v.space_id = $2
    WHERE r.namespace = $1 AND r.deleted_at IS NULL AND c.retired_at IS NULL
    ORDER BY c.surrogate"""
"""The live chunks of namespace $1 with their stored vectors in space $2 (float32 bytes)."""


@dataclass
class Stored:
    """The daemon's stored vectors of the namespace, row-aligned with their surrogates and records."""

    surrogates: np.ndarray
    record_ids: list[uuid.UUID]
    texts: list[str]
    vectors: np.ndarray


async def load_stored(dsn: str, space_id: str) -> Stored:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(STORED_CHUNKS_SQL, NAMESPACE, space_id)
    finally:
        await conn.close()
    vectors = np.frombuffer(b"".join(r["vector"] for r in rows), dtype="<f4").reshape(len(rows), -1)
    return Stored(
        surrogates=np.array([r["surrogate"] for r in rows], dtype=np.int64),
        record_ids=[r["record_id"] for r in rows],
        texts=[r["text"] for r in rows],
        vectors=np.ascontiguousarray(vectors, dtype=np.float32),
    )
