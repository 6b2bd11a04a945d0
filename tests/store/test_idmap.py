"""The id map in PostgreSQL: 200 fixed-seed cases of writes, revisions, forgets and re-embeds.

Every case checks what FAISS relies on: surrogates are unique, positive int64, assigned in
increasing order and never reused; a chunk of a stale or forgotten revision is retired in the
same transaction as the change; a build snapshot holds exactly the live chunks; the same chunk
embedded in a second space keeps its surrogate; and an id-map snapshot restores exactly.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from pathlib import Path

import asyncpg
import numpy as np
import pytest

from recalld.actors.index.generation import IdMap
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import RecordToIndex
from recalld.store.records import RecordFields, RecordRepository
from recalld.store.vectors import PgVectorStore

pytestmark = pytest.mark.anyio
CASES = 200
DIM = 8
CHUNKER = "c1:1000:150"
SPACE = VectorSpace(provider="test", model="a", dimension=DIM, normalized=True, template_version=1)
OTHER = VectorSpace(provider="test", model="b", dimension=DIM, normalized=True, template_version=1)


def unit(rng: random.Random, n: int) -> np.ndarray:
    v = np.array([[rng.gauss(0, 1) for _ in range(DIM)] for _ in range(n)], dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


async def store_for(
    store: PgVectorStore, space: VectorSpace, repo: RecordRepository, rid: uuid.UUID, rng: random.Random
) -> int:
    row = await repo.get(rid)
    if row is None:
        return 0
    texts = [f"{row['body']} part {i}" for i in range(1 + len(row["body"]) % 3)]
    hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    record = RecordToIndex(rid, row["revision"], row["namespace"], row["title"], row["body"])
    return await store.store_batch(space.key, CHUNKER, [(record, texts, hashes, unit(rng, len(texts)))])


async def test_id_map_properties_over_200_seeded_cases(pool: asyncpg.Pool, tmp_path: Path) -> None:
    repo, store = RecordRepository(pool), PgVectorStore(pool)
    await store.ensure_space(SPACE)
    await store.ensure_space(OTHER)
    assigned: list[int] = []  # every surrogate, in the order the sequence handed it out
    for seed in range(CASES):
        rng = random.Random(seed)
        ns = f"case-{seed}"
        ids = []
        for i in range(rng.randint(1, 4)):
            fields = RecordFields(ns, "doc", f"title {i}", "body " * rng.randint(1, 5), {}, None)
            ids.append((await repo.create(fields))[0])
        before = await _max_surrogate(pool)
        for rid in ids:
            await store_for(store, SPACE, repo, rid, rng)
        # changes: a new revision or a forget, each retiring the old chunks atomically
        for rid in ids:
            action = rng.choice(["keep", "update", "forget"])
            if action == "update":
                row = await repo.get(rid)
                assert row is not None
                fields = RecordFields(ns, "doc", row["title"], row["body"] + "more ", {}, None)
                await repo.update(rid, fields)
                await store_for(store, SPACE, repo, rid, rng)
            elif action == "forget":
                await repo.forget(rid)
        # storing for a revision that is no longer live writes nothing
        stale = RecordToIndex(ids[0], 99, ns, "t", "b")
        assert await store.store_batch(SPACE.key, CHUNKER, [(stale, ["x"], ["h"], unit(rng, 1))]) == 0
        # the same live chunks in a second space keep their surrogates
        for rid in ids:
            await store_for(store, OTHER, repo, rid, rng)

        async with pool.acquire() as conn:
            rows = await conn.fetch(
                "SELECT c.surrogate, c.record_id, c.revision, c.retired_at, r.revision AS live, r.deleted_at "
                "FROM chunks c JOIN records r ON r.id = c.record_id WHERE c.namespace = $1 ORDER BY c.surrogate",
                ns,
            )
            spaces = await conn.fetch(
                "SELECT v.space_id, v.surrogate FROM chunk_vectors v JOIN chunks c ON c.surrogate = v.surrogate "
                "WHERE c.namespace = $1",
                ns,
            )
        new = [r["surrogate"] for r in rows]
        assert all(s > before for s in new), f"seed {seed}: a surrogate was reused"
        assert all(0 < s < 2**63 for s in new)
        assigned.extend(new)
        for r in rows:
            live = r["deleted_at"] is None and r["revision"] == r["live"]
            assert (r["retired_at"] is None) == live, f"seed {seed}: retired flag wrong for {dict(r)}"
        live_surrogates = {r["surrogate"] for r in rows if r["retired_at"] is None}
        by_space = {(s["space_id"], s["surrogate"]) for s in spaces}
        assert {s for sp, s in by_space if sp == OTHER.key} == live_surrogates, f"seed {seed}: re-embed moved ids"

    assert assigned == sorted(assigned) and len(set(assigned)) == len(assigned), "surrogates collide or go back"
    # the build snapshot is exactly the live chunks, each mapped to its record and revision
    snapshot, source, _tombstone, missing = await store.build_snapshot(SPACE.key, CHUNKER, DIM)
    async with pool.acquire() as conn:
        expected = await conn.fetch(
            "SELECT c.surrogate, c.record_id, c.revision, c.namespace FROM chunks c "
            "JOIN chunk_vectors v ON v.surrogate = c.surrogate AND v.space_id = $1 "
            "WHERE c.retired_at IS NULL ORDER BY c.surrogate",
            SPACE.key,
        )
    assert snapshot.surrogates.tolist() == [r["surrogate"] for r in expected]
    assert snapshot.record_ids == [r["record_id"] for r in expected]
    assert snapshot.revisions.tolist() == [r["revision"] for r in expected]
    assert source == max(assigned) and missing == 0
    # snapshot restore: the id map written with a generation reads back identically
    id_map = IdMap.from_rows(snapshot.surrogates, snapshot.record_ids, snapshot.revisions, snapshot.namespaces)
    id_map.save(tmp_path / "idmap.npz")
    restored = IdMap.load(tmp_path / "idmap.npz")
    assert len(restored) == len(id_map)
    for i in range(len(id_map)):
        assert restored.record_uuid(i) == id_map.record_uuid(i) and restored.namespace(i) == id_map.namespace(i)
    assert np.array_equal(restored.surrogate, id_map.surrogate)
    assert np.array_equal(restored.revision, id_map.revision)


async def _max_surrogate(pool: asyncpg.Pool) -> int:
    async with pool.acquire() as conn:
        return int(await conn.fetchval("SELECT coalesce(max(surrogate), 0) FROM chunks"))
