"""Generations, built and chosen: the builder's background builds, their history, and the
rollback (or roll-forward) of the pointer to a verified generation."""

from __future__ import annotations

import datetime as dt
import logging
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

import anyio
import msgspec

from recalld.actors.index.generation import Generation, IdMap, build_generation, load_generation, manifest_sha256
from recalld.actors.index.handle import Handle
from recalld.actors.index.manifest import Corruption, Expected, GenerationCorrupt
from recalld.actors.index.settings import IndexSettings, factory_for
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import (
    BuildSource,
    CopySource,
    GenerationCatalogue,
    GenerationCopy,
    GenerationRow,
    VectorRows,
)

log = logging.getLogger("recalld.index")

BuildState = Literal["queued", "running", "done", "failed", "skipped"]

BUILDS_KEPT = 20
"""Builds `IndexManager.builds()` remembers, newest first."""


class BuildStatus(msgspec.Struct, kw_only=True):
    id: str
    state: BuildState
    reason: str
    started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    done: int = 0
    total: int = 0
    generation: str | None = None
    error: str | None = None


class GenerationNotFound(Exception):
    """`activate` was given an id that names no verified generation."""


class SpaceMismatch(Exception):
    """`activate` was given a generation of a vector space the configured model cannot query."""


class PointerMoved(Exception):
    """Another daemon (or request) moved the generation pointer while `activate` checked; try again."""


def query_compatible(index: str, query: VectorSpace | None, spaces: dict[str, VectorSpace]) -> bool:
    """Can a query embedded in `query` search an index built in space `index`?

    Only the model side must agree (provider, model, dimension, metric, normalisation): a
    document-template change alters what was embedded, not what a query vector means, so the
    old generation keeps serving while the new template's generation is built.
    """
    built = spaces.get(index)
    if query is None or built is None:
        return False
    same = ("provider", "model", "dimension", "metric", "normalized")
    return all(getattr(built, f) == getattr(query, f) for f in same)


async def verify(root: Path, row: GenerationRow, copy: GenerationCopy | None = None) -> Generation:
    """Load a generation exactly as its row describes it (or, given `copy`, as the row and that
    copy's own digest and count describe it); GenerationCorrupt otherwise."""
    expected = Expected(
        generation_id=row.id,
        manifest_sha256=row.manifest_sha256 if copy is None else copy.manifest_sha256,
        count=row.count if copy is None else copy.count,
        space_id=row.space_id,
        source_watermark=row.source_watermark,
        tombstone_watermark=row.tombstone_watermark,
    )
    return await anyio.to_thread.run_sync(lambda: load_generation(root, expected))


Files = Literal["builder", "copy"]
"""Whose files a loaded generation's are: the builder's (checked against the generation's row),
or a copy built from the stored vectors (checked against the copy's row, `GenerationCopy`)."""


async def verify_here(store: CopyCatalogue, root: Path, row: GenerationRow) -> tuple[Generation, Files]:
    """Load `root/<row.id>` if it is either the builder's files, exactly as the row describes
    them, or a copy recorded in the store (`GenerationCopy`): the row's generation, space and
    watermarks, the copy's manifest digest and count. Every other check is the same for both
    (each file's size and SHA-256, the id map, the index's layout). GenerationCorrupt otherwise:
    a manifest no row records is damaged, whoever wrote it."""
    try:
        return await verify(root, row), "builder"
    except GenerationCorrupt as exc:
        if exc.kind != Corruption.MANIFEST_CHECKSUM:
            raise
        try:
            digest = await anyio.to_thread.run_sync(lambda: manifest_sha256(root / row.id))
        except OSError:
            raise exc from None
        copy = next((c for c in await store.copies(row.id) if c.manifest_sha256 == digest), None)
        if copy is None:
            raise
    return await verify(root, row, copy), "copy"


def is_here(root: Path, generation_id: str) -> bool:
    """Whether anything is at `root/<generation_id>`: a generation this daemon may load, or
    damaged files. Nothing there is no damage: the files were never made here (a fleet's member
    builds its own copy, `actors/index/copies.py`)."""
    return os.path.lexists(root / generation_id)


def id_map(rows: VectorRows) -> IdMap:
    return IdMap.from_rows(rows.surrogates, rows.record_ids, rows.revisions, rows.namespaces)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class CopyCatalogue(Protocol):
    """Where the copies of generations are recorded (`CopySource.copies`)."""

    async def copies(self, generation_id: str) -> list[GenerationCopy]: ...


class BuildStore(BuildSource, CopySource, GenerationCatalogue, Protocol):
    """What builds and rollbacks read and write: the build snapshot, the catalogue and pointer,
    the copies a rollback may find here."""


class Builds:
    """The builder's generations: when to build, the build itself, the history, the rollback.

    Guarantees: at most one build runs at a time; a build publishes its generation (catalogue row,
    then the pointer) only once its files are written and checksummed, and only if the pointer did
    not move meanwhile, so a crash or a race mid-build leaves the current generation serving. A
    build's failure is recorded in its status and never escapes. `activate` moves the pointer only
    to a generation that verifies now and that the configured model can query. The history holds
    the newest `BUILDS_KEPT` builds.
    """

    def __init__(
        self,
        store: BuildStore,
        settings: IndexSettings,
        spaces: dict[str, VectorSpace],
        *,
        new_generation_id: Callable[[], str],
        published: Callable[[], None],
    ) -> None:
        self._store = store
        self._settings = settings
        self._spaces = spaces
        """The manager's spaces by key (shared, not copied): what `activate` checks against."""
        self._new_id = new_generation_id
        self._published = published
        self.history: list[BuildStatus] = []
        """Newest first."""
        self.requested: BuildStatus | None = None
        self.building = False
        self.heal = False
        """The pointer's generation failed verification: build a replacement."""

    def _record(self, status: BuildStatus) -> None:
        self.history.insert(0, status)
        del self.history[BUILDS_KEPT:]

    def request(self) -> BuildStatus:
        """Queue a build (an operator asked); the next step of the builder starts it."""
        status = BuildStatus(id=uuid.uuid4().hex[:12], state="queued", reason="requested")
        self.requested = status
        self._record(status)
        return status

    def due(
        self, handle: Handle | None, space: VectorSpace, *, pending: int, quiet_for: float, copying: bool = False
    ) -> bool:
        """Should the builder build now? `quiet_for`: seconds since the last change arrived;
        `copying`: this daemon is building its own copy of the current generation, which a new
        generation would only duplicate (an operator's request or a heal still build)."""
        if self.requested is not None or self.heal:
            return True
        if copying:
            return False
        if quiet_for < self._settings.quiet_s:
            return False  # the poll timer brings us back once it is quiet
        if handle is None or handle.space_id != space.key:
            return pending == 0 and handle is not None
        if handle.base is None:
            return handle.delta_count > 0 and pending == 0
        # Forgotten and replaced vectors count like a delta: a build leaves them out of the files.
        stale = handle.delta_count + handle.tombstoned_count()
        return stale > self._settings.compact_share * max(handle.base.count, 1)

    async def build(self, space: VectorSpace) -> None:
        """Build a generation of every vector stored in `space` and make it current; the caller
        set `building` (so no second build starts meanwhile), this clears it."""
        settings = self._settings
        reason = "replace a corrupt generation" if self.heal else "automatic"
        status = self.requested or BuildStatus(id=uuid.uuid4().hex[:12], state="queued", reason=reason)
        if self.requested is None:
            self._record(status)
        self.requested = None
        status.state, status.started_at = "running", _now()
        try:
            rows, source, tombstone, missing = await self._store.build_snapshot(
                space.key, settings.chunker, space.dimension
            )
            status.total = len(rows)
            if not len(rows):
                status.state, status.error = "skipped", "nothing to index"
                return
            generation_id = self._new_id()

            def progress(done: int, total: int) -> None:
                status.done, status.total = done, total

            manifest = await anyio.to_thread.run_sync(
                lambda: build_generation(
                    settings.root,
                    generation_id=generation_id,
                    space=space,
                    space_id=space.key,
                    vectors=rows.vectors,
                    id_map=id_map(rows),
                    source_watermark=source,
                    tombstone_watermark=tombstone,
                    factory=factory_for(settings.factory, len(rows), hnsw_from=settings.auto_hnsw_from),
                    progress=progress,
                )
            )
            digest = await anyio.to_thread.run_sync(lambda: manifest_sha256(settings.root / generation_id))
            row = GenerationRow(
                id=generation_id,
                space_id=space.key,
                directory=str(settings.root / generation_id),
                manifest_sha256=digest,
                index_type=manifest.index_type,
                count=manifest.count,
                source_watermark=source,
                tombstone_watermark=tombstone,
                built_at=_now(),
            )
            await self._store.add_generation(row)
            pointer = await self._store.pointer()
            if not await self._store.move_pointer(generation_id, pointer.version):
                status.state, status.error = "failed", "the pointer moved during the build"
                return
            status.state, status.generation, status.finished_at = "done", generation_id, _now()
            self.heal = False
            log.info(
                "generation %s built and current",
                generation_id,
                extra={"count": manifest.count, "missing": missing, "space": space.key},
            )
            self._published()
        except Exception as exc:
            status.state, status.error, status.finished_at = "failed", f"{type(exc).__name__}: {exc}", _now()
            log.error("generation build failed: %s", status.error)
        finally:
            self.building = False

    async def activate(self, generation_id: str, query_space: VectorSpace | None) -> GenerationRow:
        """Roll back (or forward) to a verified generation: re-check its files, its space and
        its watermarks, then move the pointer; the pointer's followers then load it and apply the
        delta and tombstones recorded after its watermarks.

        Raises GenerationNotFound, GenerationCorrupt, SpaceMismatch (`query_space` cannot search
        it) or PointerMoved.
        """
        row = await self._store.generation(generation_id)
        if row is None or row.state != "verified":
            raise GenerationNotFound(f"no verified generation {generation_id}")
        generation, _ = await verify_here(self._store, self._settings.root, row)
        self._spaces.setdefault(row.space_id, generation.manifest.space)
        if not query_compatible(row.space_id, query_space, self._spaces):
            raise SpaceMismatch(f"generation {generation_id} is in another vector space than the configured model")
        pointer = await self._store.pointer()
        if not await self._store.move_pointer(generation_id, pointer.version):
            raise PointerMoved("the generation pointer moved meanwhile; try again")
        self._published()
        return row
