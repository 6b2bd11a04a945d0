"""Every kind of corruption of the current generation, with no verified generation to fall back
on, as a client and an operator see it: recall names the vector route in `degraded_routes` with
`vector_index_corrupt` (the other routes still answer), a vector-only recall is a 503 naming it,
and `/readyz` says why, with the kind of damage in its message.

The files are damaged on disk as a disk or a careless writer would (tests/actors/index/test_corruption.py
covers each kind at the loader, 20 seeds each); "careless writer" damages rewrite the manifest to
match and the catalogue row with it, which only a writer could. Another daemon holds the builder
lock all along (the test takes it, as that daemon would), so the daemon under test cannot replace
the damaged generation and the state it reports stays put long enough to be read.
`load_exception` has no case here: the layout check refuses every file FAISS would throw on, so
only a patched loader reaches it (tests/actors/index/test_corruption.py does).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from recalld.actors.index.layout import inspect_index_file
from recalld.actors.index.manifest import Corruption, Expected
from recalld.store.builder_lock import BUILDER_LOCK_KEY
from recalld.store.embedded import binaries
from tests.support import Daemon, create_database, scratch_dir, sql
from tests.support.embedding_service import EmbeddingServer
from tests.support.generations import rebless, space
from tests.support.waits import eventually, wait_for_generation

NS = "corrupt"
RECORDS = 6
DIMENSION = 64  # EmbeddingServer's


@pytest.fixture(scope="module")
def provider() -> Iterator[EmbeddingServer]:
    fake = EmbeddingServer(DIMENSION)
    yield fake
    fake.close()


@pytest.fixture(scope="module")
def built(postgres: Any, provider: EmbeddingServer) -> Iterator[tuple[str, Path, dict[str, Any], Path]]:
    """A database with one verified generation, its directory, its row, and a pristine copy."""
    dsn = create_database(postgres)
    home = scratch_dir("recalld-corrupt-")
    root = home / "generations"
    env = {**provider.env(), "RECALLD_STORE_DSN": dsn, "RECALLD_INDEX_DIRECTORY": str(root)}
    (home / "builder").mkdir()
    daemon = Daemon(home / "builder", env).start()
    for i in range(RECORDS):
        record = {"namespace": NS, "kind": "doc", "title": f"Orchard {i}", "body": f"Prune apple tree {i}."}
        assert daemon.call("POST", "/v1/records", record)[0] == 201
    current = wait_for_generation(daemon, lambda c: c["count"] >= RECORDS)["current"]
    assert daemon.stop() == 0
    pristine = home / "pristine"
    shutil.copytree(root / current["id"], pristine)
    yield dsn, root, current, pristine
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def builder_elsewhere(built: tuple[str, Path, dict[str, Any], Path]) -> Iterator[None]:
    """The builder advisory lock, held by a session of its own as another daemon would hold it."""
    dsn = built[0]
    holder = subprocess.Popen(
        [
            str(binaries() / "psql"),
            dsn,
            "-Atq",
            "-c",
            f"SELECT pg_advisory_lock({BUILDER_LOCK_KEY})",
            "-c",
            "SELECT pg_sleep(86400)",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def lock_taken() -> bool:
        assert holder.poll() is None, "psql ended before taking the lock"
        return bool(sql(dsn, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"))

    eventually(lock_taken, 30, "the builder lock held by the other session")
    yield
    holder.kill()
    holder.wait()


def truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as file:
        file.truncate(size)


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def vectors_offset(directory: Path, current: dict[str, Any]) -> int:
    manifest = msgspec.json.decode((directory / "manifest.json").read_bytes())
    layout = inspect_index_file(
        directory / "index.faiss",
        family="flat",
        hnsw_m=None,
        dimension=DIMENSION,
        count=current["count"],
        surrogates=np.load(directory / "idmap.npz")["surrogate"],
        normalized=True,
        generation_id=manifest["generation_id"],
    )
    return int(layout.vectors_offset)


def write_vector_value(directory: Path, current: dict[str, Any], value: Callable[[np.ndarray], np.ndarray]) -> None:
    """Rewrite the first stored vector of index.faiss in place."""
    at = vectors_offset(directory, current)
    data = bytearray((directory / "index.faiss").read_bytes())
    first = np.frombuffer(bytes(data[at : at + 4 * DIMENSION]), dtype="<f4")
    data[at : at + 4 * DIMENSION] = value(first.copy()).astype("<f4").tobytes()
    (directory / "index.faiss").write_bytes(bytes(data))


def rewrite_idmap(directory: Path) -> None:
    idmap = dict(np.load(directory / "idmap.npz"))
    idmap["surrogate"] = idmap["surrogate"][::-1].copy()  # every vector mapped to another chunk
    with open(directory / "idmap.npz", "wb") as out:
        np.savez(out, **idmap)


Damage = Callable[[Path, dict[str, Any]], Expected | None]
"""Damages a generation's directory; returns the row a careless writer recorded, or None (a disk's damage)."""

DAMAGES: dict[Corruption, Damage] = {
    Corruption.MISSING_MANIFEST: lambda d, c: (d / "manifest.json").unlink(),
    Corruption.MANIFEST_CHECKSUM: lambda d, c: flip(d / "manifest.json", 20),
    Corruption.MISSING_FILE: lambda d, c: (d / "index.faiss").unlink(),
    Corruption.FILE_SIZE: lambda d, c: truncate(d / "idmap.npz", 100),
    Corruption.FILE_CHECKSUM: lambda d, c: flip(d / "index.faiss", (d / "index.faiss").stat().st_size // 2),
    Corruption.MANIFEST_INVALID: lambda d, c: ((d / "manifest.json").write_bytes(b'{"files": 3}'), rebless_raw(d))[1],
    Corruption.GENERATION_MISMATCH: lambda d, c: rebless(d, generation_id="g-somebody-else"),
    Corruption.COUNT_MISMATCH: lambda d, c: rebless(d, count=c["count"] + 1),
    Corruption.DIMENSION_MISMATCH: lambda d, c: rebless(d, dimension=DIMENSION // 2),
    Corruption.SPACE_MISMATCH: lambda d, c: rebless(d, space=space(DIMENSION, model="another-model")),
    Corruption.WATERMARK_MISMATCH: lambda d, c: rebless(d, source_watermark=0),
    Corruption.NON_FINITE_VECTORS: lambda d, c: (write_vector_value(d, c, lambda v: v * np.nan), rebless(d))[1],
    Corruption.BAD_VECTOR_NORM: lambda d, c: (write_vector_value(d, c, lambda v: v * 3), rebless(d))[1],
    Corruption.ID_MAP_MISMATCH: lambda d, c: (rewrite_idmap(d), rebless(d))[1],
    Corruption.INDEX_STRUCTURE: lambda d, c: (flip(d / "index.faiss", 2), rebless(d))[1],
}


def rebless_raw(directory: Path) -> Expected:
    """A manifest that is not one, recorded by its checksum: only the decoding can refuse it."""
    from recalld.actors.index.generation import manifest_sha256

    return Expected(
        generation_id=directory.name,
        manifest_sha256=manifest_sha256(directory),
        count=0,
        space_id="",
        source_watermark=0,
        tombstone_watermark=0,
    )


def routes_named(answer: dict[str, Any]) -> list[tuple[str, str]]:
    return [(d["route"], d["reason"]) for d in answer["degraded_routes"]]


def test_every_kind_of_corruption_has_a_case() -> None:
    assert set(Corruption) - set(DAMAGES) == {Corruption.LOAD_EXCEPTION}


@pytest.mark.parametrize("kind", list(DAMAGES), ids=[str(k) for k in DAMAGES])
def test_a_corrupt_current_generation_with_no_fallback_is_reported_to_clients_and_operators(
    kind: Corruption,
    built: tuple[str, Path, dict[str, Any], Path],
    builder_elsewhere: None,
    provider: EmbeddingServer,
) -> None:
    dsn, root, current, pristine = built
    directory = root / current["id"]
    shutil.rmtree(directory, ignore_errors=True)
    shutil.copytree(pristine, directory)
    sql(dsn, "UPDATE generations SET manifest_sha256 = $1 WHERE id = $2", current["manifest_sha256"], current["id"])
    recorded = DAMAGES[kind](directory, current)
    if recorded is not None:
        sql(dsn, "UPDATE generations SET manifest_sha256 = $1 WHERE id = $2", recorded.manifest_sha256, current["id"])

    home = scratch_dir("recalld-corrupt-daemon-")
    env = {**provider.env(), "RECALLD_STORE_DSN": dsn, "RECALLD_INDEX_DIRECTORY": str(root)}
    daemon = Daemon(home, env).start()
    try:
        # a whole step of the index loop (it refreshes the handle before it counts the pass), so
        # that what the loop does with the stored vectors is part of what is checked
        eventually(
            lambda: daemon.call("GET", "/readyz")[1],
            60,
            "a whole step of the index loop",
            accept=lambda ready: (ready["checks"]["vector"].get("detail") or {}).get("full_passes", 0) >= 1,
        )
        status, answer = daemon.call("POST", "/v1/recall", {"namespace": NS, "query": "apple trees"})
        assert status == 200, answer
        assert ("vector", "vector_index_corrupt") in routes_named(answer), answer
        assert answer["results"], "the full-text route still answers"
        assert all("vector" not in hit["routes"] for hit in answer["results"]), "nothing served from the damage"
        status, refused = daemon.call("POST", "/v1/recall", {"namespace": NS, "query": "apple", "routes": ["vector"]})
        assert status == 503 and refused["error"]["code"] == "route_unavailable", refused
        assert routes_named(refused) == [("vector", "vector_index_corrupt")], refused
        _, ready = daemon.call("GET", "/readyz")
        vector = ready["checks"]["vector"]
        assert vector["status"] != "pass" and vector["reason"] == "vector_index_corrupt", vector
        assert str(kind) in vector["detail"]["message"], vector
    finally:
        daemon.stop()
        shutil.rmtree(home, ignore_errors=True)
