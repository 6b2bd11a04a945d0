"""50 concurrent searches against a cell whose handle keeps changing under them.

Builds, loads, deltas, tombstones and space switches swap new handles in while searches run in
worker threads. Every search must run on an open handle of one vector space and never return a
tombstoned surrogate; at the end only the current handle is open and no lease is left.
"""

from __future__ import annotations

import gc
import weakref
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import numpy as np
import pytest

from recalld.actors.index.generation import Generation, build_generation, load_generation, manifest_sha256
from recalld.actors.index.handle import Handle, HandleCell, Hit
from recalld.actors.index.listing import list_generation_dirs
from recalld.actors.index.manifest import Expected
from tests.support.generations import id_map_for, space, unit_vectors
from tests.support.waits import eventually_async

SEARCHERS = 50
ROUNDS = 12
SPACES = [space(16, model="model-a"), space(24, model="model-b")]
# Surrogates of each space live in their own range, so a hit shows which space it came from.
RANGE = 1_000_000

# Real clocks on both: the index tests wait on worker threads, never on timers.
pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio", real_clock=True)]


def build_and_load(root: Path, round_no: int, space_no: int, upto: int) -> Generation:
    vs = SPACES[space_no]
    rng = np.random.default_rng(round_no)
    surrogates = np.arange(upto, dtype=np.int64) + space_no * RANGE + 1
    namespaces = ["a" if s % 3 else "b" for s in surrogates]
    manifest = build_generation(
        root,
        generation_id=f"gen-{round_no:02d}",
        space=vs,
        space_id=vs.key,
        vectors=unit_vectors(rng, upto, vs.dimension),
        id_map=id_map_for(surrogates, namespaces=namespaces),
        source_watermark=int(surrogates[-1]),
        tombstone_watermark=0,
        factory="HNSW8" if round_no % 4 == 3 else "Flat",
    )
    expected = Expected.from_manifest(manifest, manifest_sha256(root / manifest.generation_id))
    return load_generation(root, expected)


async def test_searches_never_see_a_closed_handle_a_mixed_space_or_a_forgotten_vector(tmp_path: Path) -> None:
    root = tmp_path / "generations"
    generation0 = await anyio.to_thread.run_sync(build_and_load, root, 0, 0, 400)
    handles: list[Handle] = [Handle.of(generation0)]
    cell = HandleCell(handles[0])
    generations = [weakref.ref(generation0)]
    del generation0
    violations: list[str] = []
    searches = 0
    building = True
    swapped_while_leased = 0
    limiter = anyio.CapacityLimiter(SEARCHERS)

    def check_parts(handle: Handle) -> None:
        base = handle.base
        if base is not None and base.space_id != handle.space_id:
            violations.append("base generation from another space")
        if any(delta.index.d != handle.space.dimension for delta in handle.deltas):
            violations.append("delta from another space")

    def search(handle: Handle, query: np.ndarray) -> list[Hit]:
        if handle.closed:
            violations.append("search started on a closed handle")
        hits = handle.search(query, k_records=5, namespace="a")
        if handle.closed:
            violations.append("handle closed while a search ran on it")
        return hits

    async def searcher(seed: int) -> None:
        nonlocal searches
        rng = np.random.default_rng(1000 + seed)
        while building or searches < 4 * SEARCHERS:
            async with cell.lease() as handle:
                assert handle is not None
                check_parts(handle)
                query = unit_vectors(rng, 1, handle.space.dimension)[0]
                hits = await anyio.to_thread.run_sync(partial(search, handle, query), limiter=limiter)
                space_no = SPACES.index(handle.space)
                for hit in hits:
                    if hit.surrogate // RANGE != space_no:
                        violations.append(f"surrogate {hit.surrogate} from another space")
                    if hit.surrogate in handle.tombstones:
                        violations.append(f"tombstoned surrogate {hit.surrogate} returned")
                    if hit.surrogate % 3 == 0:
                        violations.append(f"surrogate {hit.surrogate} from namespace b")
                if len(hits) != 5:
                    violations.append(f"{len(hits)} hits")
                searches += 1
            # Pace the searchers so that two cores are left for the builds they interleave with.
            await anyio.sleep(0.1)

    async def swap(new: Handle) -> None:
        nonlocal swapped_while_leased
        # Swap only while searches hold the current handle, so every swap races running searches.
        # (Polling: the cell publishes counters, not events.)
        await eventually_async(
            lambda: cell.open_leases > 0 and cell.live_handles == 1,
            20,
            "searches holding the current handle",
            poll=0.001,
        )
        handles.append(new)
        cell.swap(new)
        # More than one live handle: the replaced one is still leased by running searches.
        swapped_while_leased += cell.live_handles > 1

    async def changer() -> None:
        nonlocal building
        rng = np.random.default_rng(7)
        space_no, size = 0, 400
        for round_no in range(1, ROUNDS + 1):
            if round_no % 5 == 0:
                space_no = 1 - space_no  # a model switch: a new space, built while the old serves
            size += 50
            new = await anyio.to_thread.run_sync(build_and_load, root, round_no, space_no, size)
            generations.append(weakref.ref(new))
            await swap(Handle.of(new))
            del new
            await anyio.sleep(0.01)
            # Vectors after the watermark arrive as a delta, then some are forgotten.
            base = size + space_no * RANGE
            new_surrogates = np.arange(20, dtype=np.int64) + base + 1
            added = id_map_for(new_surrogates, namespaces=["a" if s % 3 else "b" for s in new_surrogates])
            dim = SPACES[space_no].dimension
            await swap(handles[-1].with_delta(unit_vectors(rng, 20, dim), added))
            await anyio.sleep(0.01)
            victims = [s for s in rng.integers(base - size, base + 20, 60).tolist() if s % 3]
            await swap(handles[-1].with_tombstones(victims))
            await anyio.sleep(0.01)
        building = False

    async with anyio.create_task_group() as tg:
        for seed in range(SEARCHERS):
            tg.start_soon(searcher, seed)
        tg.start_soon(changer)

    assert violations == []
    assert searches >= 4 * SEARCHERS
    assert swapped_while_leased == 3 * ROUNDS, "every swap happened while searches were running"
    assert len(handles) == 1 + 3 * ROUNDS
    assert cell.open_leases == 0 and cell.live_handles == 1
    assert cell.current() is handles[-1]
    assert [h for h in handles if not h.closed] == [handles[-1]]
    assert not any(name.startswith(".tmp-") for name in list_generation_dirs(root))
    gc.collect()
    alive = [ref() for ref in generations if ref() is not None]
    assert alive == [handles[-1].base], "every generation but the current one was released"
