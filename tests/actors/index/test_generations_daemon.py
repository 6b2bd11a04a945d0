"""Generations across daemons and vector spaces: a template change and a model change over
1,000 records, several daemons on one database, and a corrupt generation on disk."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from recalld.actors.embedding import template
from recalld.actors.index.generation import load_generation
from recalld.actors.index.manifest import Expected
from tests.support import Daemon, scratch_dir, sql
from tests.support.embedding_service import EmbeddingServer, vector_for
from tests.support.waits import eventually, wait_for_generation

RECORDS = 1000
WAIT_S = 240  # a thousand records embedded, or a whole space rebuilt


def check_mapping(dsn: str, root: Path, current: dict[str, Any], sample: list[str]) -> None:
    """Each sampled record: its chunk surrogate, text hash and vector in the generation's space,
    and the generation file maps that vector back to exactly that surrogate, record and revision."""
    generation = load_generation(
        root,
        Expected(
            generation_id=current["id"],
            manifest_sha256=current["manifest_sha256"],
            count=current["count"],
            space_id=current["space_id"],
            source_watermark=current["source_watermark"],
            tombstone_watermark=current["tombstone_watermark"],
        ),
    )
    rows = sql(
        dsn,
        "SELECT c.surrogate, c.record_id, c.revision, c.text, c.text_sha256, v.vector, r.revision AS live "
        "FROM chunks c JOIN chunk_vectors v ON v.surrogate = c.surrogate AND v.space_id = $1 "
        "JOIN records r ON r.id = c.record_id "
        "WHERE c.record_id = ANY($2::uuid[]) AND c.retired_at IS NULL",
        current["space_id"],
        [uuid.UUID(s) for s in sample],
    )
    assert {str(r["record_id"]) for r in rows} == set(sample)
    by_surrogate = {int(s): i for i, s in enumerate(generation.id_map.surrogate)}
    for r in rows:
        assert r["revision"] == r["live"]
        assert r["text_sha256"] == hashlib.sha256(r["text"].encode()).hexdigest()
        vector = np.frombuffer(r["vector"], dtype="<f4")
        assert vector.shape == (current["space"]["dimension"],)
        row = by_surrogate[r["surrogate"]]
        assert generation.id_map.record_uuid(row) == r["record_id"]
        assert int(generation.id_map.revision[row]) == r["revision"]
        stored = generation.index.reconstruct(int(r["surrogate"]))
        assert np.allclose(stored, vector, atol=1e-6), "the generation holds the stored vector under its surrogate"


@pytest.mark.slow
def test_template_change_then_model_change_over_1000_records(make_daemon: Any, fresh_dsn: str) -> None:
    shared = scratch_dir("recalld-test-generations-")
    # Duplicate checks cut at once (skipped, the records written): 1,000 titles this alike make
    # each batch's checks compare every item with hundreds of near-duplicates (tests/services/
    # test_native_threads.py), and what is tested here is the switches.
    env = {"RECALLD_INDEX_DIRECTORY": str(shared), "RECALLD_DUPLICATES_TIME_CAP_S": "0.001"}
    daemon: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    ns = "switch"
    records = [
        {
            "namespace": ns,
            "kind": "doc",
            "title": f"Runbook {i}",
            "body": f"Step {i}: check the pump, log pressure {i % 17}.",
        }
        for i in range(RECORDS)
    ]
    ids = daemon.create_all(records)  # batches: the writes only set up the switches below
    first = wait_for_generation(daemon, lambda c: c["count"] >= RECORDS, timeout=WAIT_S)["current"]
    assert first["space"]["template_version"] == 1 and first["space"]["dimension"] == 384
    sample = ids[:: RECORDS // 40]
    check_mapping(fresh_dsn, shared, first, sample)
    assert daemon.stop() == 0

    # A template change: the v1 generation keeps answering while the v2 one is built.
    daemon = make_daemon(dsn=fresh_dsn, env={**env, "RECALLD_EMBEDDING_TEMPLATE_VERSION": "2"})
    status, answer = daemon.call(
        "POST", "/v1/recall", {"namespace": ns, "query": "pump pressure", "routes": ["vector"]}
    )
    assert status == 200 and answer["results"] and not answer["degraded_routes"]
    second = wait_for_generation(
        daemon, lambda c: c["space"]["template_version"] == 2 and c["count"] >= RECORDS, timeout=WAIT_S
    )["current"]
    assert second["space_id"] != first["space_id"]
    check_mapping(fresh_dsn, shared, second, sample)
    surrogates = sql(fresh_dsn, "SELECT space_id, count(*) FROM chunk_vectors GROUP BY space_id ORDER BY space_id")
    assert sorted(r["count"] for r in surrogates) == [RECORDS, RECORDS], "re-embedding kept one surrogate per chunk"
    assert daemon.stop() == 0

    # A model change (another dimension): the vector route says so until the new space is built.
    fake = EmbeddingServer(dimension=64)
    try:
        fake.delay_s = 1.0  # each embedding call (not the start-up probe): the switch lasts a while
        daemon = make_daemon(dsn=fresh_dsn, env={**env, **fake.env()})

        def vector_reasons() -> set[str]:
            status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "pump pressure"})
            assert status == 200 and answer["results"], "full-text answers during the switch"
            return {d["reason"] for d in answer["degraded_routes"] if d["route"] == "vector"}

        eventually(
            vector_reasons,
            30,
            "the vector route saying its space is being rebuilt",
            accept=lambda reasons: "vector_space_rebuilding" in reasons,
        )
        fake.delay_s = 0.0
        third = wait_for_generation(daemon, lambda c: c["space"]["model"] == "fake-embedder", timeout=WAIT_S)["current"]
        assert third["space"]["dimension"] == 64 and third["count"] >= RECORDS
        check_mapping(fresh_dsn, shared, third, sample)
        rows = sql(
            fresh_dsn,
            "SELECT c.text, r.title, v.vector FROM chunks c JOIN records r ON r.id = c.record_id "
            "JOIN chunk_vectors v ON v.surrogate = c.surrogate AND v.space_id = $1 WHERE c.record_id = ANY($2::uuid[])",
            third["space_id"],
            [uuid.UUID(s) for s in sample],
        )
        for r in rows:  # the vector is the one the new model gave for this chunk's rendered input
            rendered = template.render_document(r["title"], r["text"], version=1).text
            assert np.allclose(np.frombuffer(r["vector"], dtype="<f4"), vector_for(rendered, 64), atol=1e-6)
        # The catalogue names the new generation current a moment before the handle serving
        # recall has loaded it: wait for the route to answer from it (a bounded wait, not a sleep).

        def vector_generation() -> str:
            status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "pump", "routes": ["vector"]})
            assert status == 200 and answer["results"], answer
            return str(answer["generation"])

        eventually(
            vector_generation,
            WAIT_S,
            "the vector route answering from the new generation",
            accept=lambda g: g == third["id"],
        )
        listed = {g["id"] for g in daemon.call("GET", "/v1/generations")[1]["generations"]}
        assert {first["id"], second["id"], third["id"]} <= listed, "earlier generations stay for rollback"
        assert daemon.stop() == 0
    finally:
        fake.close()


def test_several_daemons_one_builder_the_others_follow(make_daemon: Any, fresh_dsn: str) -> None:
    shared = scratch_dir("recalld-test-shared-")
    env = {"RECALLD_INDEX_DIRECTORY": str(shared)}
    builder: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    follower: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    ns = "pair"
    for i in range(5):
        assert (
            follower.call(
                "POST",
                "/v1/records",
                {"namespace": ns, "kind": "doc", "title": f"Kiln note {i}", "body": "Fire the clay slowly."},
            )[0]
            == 201
        )
    built = wait_for_generation(builder, lambda c: c["count"] >= 5, timeout=WAIT_S)
    followed = wait_for_generation(follower, lambda c: c["id"] == built["current"]["id"], timeout=30)
    roles = sorted([built["index"]["builder"], followed["index"]["builder"]])
    assert roles == [False, True], "exactly one daemon holds the builder lock"
    eventually(
        lambda: follower.call("POST", "/v1/recall", {"namespace": ns, "query": "pottery", "routes": ["vector"]}),
        30,
        "the follower finding all five by meaning in the built generation",
        accept=lambda reply: (
            reply[0] == 200 and reply[1]["generation"] == built["current"]["id"] and len(reply[1]["results"]) == 5
        ),
    )
    # the builder stops: the follower takes the lock over and keeps indexing
    assert builder.stop() == 0
    follower.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Glaze note", "body": "Dip twice."})
    eventually(
        lambda: follower.call("GET", "/v1/generations")[1],
        60,
        "the follower building, with the new record indexed",
        accept=lambda body: body["index"]["builder"] and body["pending"] == 0 and body["index"]["handle"]["count"] >= 6,
    )


def test_a_corrupt_current_generation_falls_back_and_is_rebuilt(make_daemon: Any, fresh_dsn: str) -> None:
    shared = scratch_dir("recalld-test-corrupt-")
    env = {"RECALLD_INDEX_DIRECTORY": str(shared)}
    daemon: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    ns = "corrupt"
    for i in range(8):
        daemon.call(
            "POST",
            "/v1/records",
            {"namespace": ns, "kind": "doc", "title": f"Orchard {i}", "body": "Prune apple trees."},
        )
    first = wait_for_generation(daemon, lambda c: c["count"] >= 8, timeout=WAIT_S)["current"]
    assert daemon.call("POST", "/admin/generations/rebuild", {})[0] == 202
    second = wait_for_generation(daemon, lambda c: c["id"] != first["id"], timeout=WAIT_S)["current"]
    assert daemon.stop() == 0
    index_file = shared / second["id"] / "index.faiss"
    data = bytearray(index_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    index_file.write_bytes(bytes(data))

    daemon = make_daemon(dsn=fresh_dsn, env=env)
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "fruit trees", "routes": ["vector"]})
    # served from an earlier verified generation, never from the damaged file: `first`, or one the
    # builder made between it and the rebuild (the catch-up may build again as the records land)
    served = answer["generation"]
    assert status == 200 and served not in (None, second["id"]) and len(answer["results"]) == 8, answer
    ready = daemon.call("GET", "/readyz")[1]
    assert ready["checks"]["vector"]["status"] == "pass"
    earlier = (first["id"], second["id"], served)
    third = wait_for_generation(daemon, lambda c: c["id"] not in earlier, timeout=WAIT_S)["current"]
    assert third["count"] >= 8, "the builder replaced the corrupt generation"


def test_forgetting_the_newest_records_leaves_nothing_pending_after_a_restart(make_daemon: Any, fresh_dsn: str) -> None:
    shared = scratch_dir("recalld-test-forget-")
    env = {"RECALLD_INDEX_DIRECTORY": str(shared)}
    daemon: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    ns = "forget-newest"

    def add(title: str) -> str:
        status, created = daemon.call(
            "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": "Water the garden."}
        )
        assert status == 201, created
        return str(created["id"])

    for i in range(10):
        add(f"Garden {i}")
    base = wait_for_generation(daemon, lambda c: c["count"] >= 10, timeout=WAIT_S)["current"]
    newest = add("Garden, the newest")  # a delta of one: too small to rebuild the generation
    eventually(
        lambda: daemon.call("GET", "/v1/generations")[1],
        60,
        "the newest record in the delta",
        accept=lambda body: not body["pending"] and body["index"]["handle"]["delta"] >= 1,
    )
    assert daemon.call("DELETE", f"/v1/records/{newest}")[0] == 200
    assert daemon.stop() == 0

    # The handle reloads the generation and the live vectors after it; the forgotten newest one
    # is not among them, and must not count as stored but unloaded ("pending") for ever.
    daemon = make_daemon(dsn=fresh_dsn, env=env)
    body = wait_for_generation(daemon, lambda c: c["id"] == base["id"], timeout=30)
    assert body["pending"] == 0
