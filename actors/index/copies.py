"""A daemon's own copies of published generations.

Daemons of a fleet share nothing but PostgreSQL: each has a generations directory of its own.
When the pointer names a generation whose directory this daemon does not have, it builds its own
copy from the vectors stored in PostgreSQL up to that generation's source watermark (never
embedding anything again), under the same generation id, and loads it as it loads any other.

What "verified" means for a copy. Its files cannot be the builder's byte for byte (an HNSW graph
built twice differs), so it is never checked against the builder's checksums; it passes every
other check a builder's generation passes, against a record of its own:

- at build: every vector is read in one snapshot (the live chunks of the generation's space and
  chunker, stored at or below its source watermark), checked (finite, unit length in a
  normalised space, unique surrogates at or below the watermark), written, read back through
  every check loading makes, and searched for (each of 32 known vectors must find itself); the
  manifest names the generation's id, space, index type and both watermarks; the copy's
  manifest digest and count are recorded in PostgreSQL (`GenerationCopy`) before its directory
  is renamed into place, so no copy can be loaded that is not recorded;
- at every load, this start's and later ones: the manifest must hash to a recorded copy's
  digest, name the generation's row (id, space, watermarks) and the copy's count, and every file
  must have the size and SHA-256 it lists; the id map and the index file's layout are checked as
  for any generation (`actors/index/builds.py`, `verify_here`).

A copy may hold fewer vectors than the builder's files: a chunk retired (an update, a forget)
since the builder's snapshot has no vector left in PostgreSQL, and the builder's handle hides it
anyway (its tombstone). Files that are here but match neither the row nor a recorded copy are
damaged: that is `vector_index_corrupt`, never a reason to build over them.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Literal, Protocol

import anyio
import anyio.from_thread
import msgspec
from anyio.abc import TaskGroup

from recalld.actors.index.builds import id_map
from recalld.actors.index.generation import build_generation
from recalld.actors.index.manifest import Manifest
from recalld.actors.index.settings import IndexSettings
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import CopySource, GenerationCopy, GenerationRow, SpaceCatalogue

log = logging.getLogger("recalld.index")

COPY_RETRY_S = 30.0
"""A copy that failed (the store away, a full disk) is tried again after this long at the
earliest; meanwhile the daemon serves what it has."""

CopyState = Literal["running", "done", "failed"]


class CopyStatus(msgspec.Struct, kw_only=True):
    """The last copy this daemon built, or is building."""

    generation: str
    state: CopyState
    started_at: dt.datetime
    finished_at: dt.datetime | None = None
    count: int = 0
    error: str | None = None


class CopyStore(CopySource, SpaceCatalogue, Protocol):
    """What building a copy reads and records: the stored vectors, the spaces, the copies."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Copies:
    """Builds this daemon's own copies of published generations, one at a time, in the background.

    Guarantees: at most one copy is built at a time; a copy is built under the generation's own
    id in this daemon's directory and is recorded in the store before it is installed (see the
    module docstring); a failure is recorded in `last` and logged, never raised, and that
    generation is not tried again for `COPY_RETRY_S`. `done` is called after each copy, built or
    failed, so the owner takes it in at once.
    """

    def __init__(
        self,
        store: CopyStore,
        settings: IndexSettings,
        spaces: dict[str, VectorSpace],
        *,
        member: str,
        done: Callable[[], None],
    ) -> None:
        self._store = store
        self._settings = settings
        self._spaces = spaces
        """The manager's spaces by key (shared, not copied)."""
        self._member = member
        self._done = done
        self.building: str | None = None
        """The generation whose copy is being built now."""
        self.last: CopyStatus | None = None
        self._failed_at: dict[str, float] = {}
        """anyio time of each generation's last failed copy."""

    def start(self, row: GenerationRow, tasks: TaskGroup) -> bool:
        """Start building a copy of `row` in `tasks`, unless a copy is being built already or this
        generation's failed less than `COPY_RETRY_S` ago. Whether `row`'s copy is being built now."""
        if self.building is not None:
            return self.building == row.id
        failed = self._failed_at.get(row.id)
        if failed is not None and anyio.current_time() - failed < COPY_RETRY_S:
            return False
        self.building = row.id
        tasks.start_soon(self._build, row)
        return True

    async def _build(self, row: GenerationRow) -> None:
        status = CopyStatus(generation=row.id, state="running", started_at=_now())
        self.last = status
        settings = self._settings
        try:
            space = await self._space(row.space_id)
            watermark = row.source_watermark
            rows = await self._store.copy_snapshot(row.space_id, settings.chunker, space.dimension, watermark)

            def record(manifest: Manifest, digest: str) -> None:
                # In the worker thread, before the rename: no copy is ever installed unrecorded.
                copy = GenerationCopy(
                    generation_id=row.id,
                    manifest_sha256=digest,
                    count=manifest.count,
                    member=self._member,
                    built_at=manifest.built_at,
                )
                anyio.from_thread.run(self._store.add_copy, copy)

            manifest = await anyio.to_thread.run_sync(
                lambda: build_generation(
                    settings.root,
                    generation_id=row.id,
                    space=space,
                    space_id=row.space_id,
                    vectors=rows.vectors,
                    id_map=id_map(rows),
                    source_watermark=row.source_watermark,
                    tombstone_watermark=row.tombstone_watermark,
                    factory=row.index_type,
                    before_install=record,
                )
            )
            status.state, status.count = "done", manifest.count
            self._failed_at.pop(row.id, None)
            log.info(
                "own copy of generation %s built from the stored vectors",
                row.id,
                extra={"count": manifest.count, "published_count": row.count, "space": row.space_id},
            )
        except Exception as exc:
            status.state, status.error = "failed", f"{type(exc).__name__}: {exc}"
            self._failed_at[row.id] = anyio.current_time()
            log.error("copy of generation %s failed: %s", row.id, status.error)
        finally:
            status.finished_at = _now()
            self.building = None
            self._done()

    async def _space(self, space_id: str) -> VectorSpace:
        """The vector space of a generation: known here already, or as the store records it."""
        space = self._spaces.get(space_id)
        if space is not None:
            return space
        spec = (await self._store.spaces()).get(space_id)
        if spec is None:
            raise LookupError(f"the store knows no vector space {space_id}")
        space = msgspec.convert(spec, VectorSpace)
        if space.key != space_id:
            raise ValueError(f"the stored spec of space {space_id} has the key {space.key}")
        self._spaces.setdefault(space_id, space)
        return space
