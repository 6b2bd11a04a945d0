"""Following the generation pointer: which generation this daemon serves, from its own directory.

When the pointer moves (the builder published a generation, or a rollback), the index manager
loads the generation it names from this daemon's generations directory: the builder's files when
they are here (this daemon built them, or shares the builder's directory), else this daemon's own
copy, built from the stored vectors in the background (`actors/index/copies.py`) while the handle
it has keeps serving. A generation whose files are here but fail verification is corrupt: it is
never served, and the previous verified one serves if nothing does yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio.abc import TaskGroup

from recalld.actors.index.builds import Builds, Files, is_here, verify_here
from recalld.actors.index.copies import Copies
from recalld.actors.index.generation import Generation
from recalld.actors.index.handle import Handle, HandleCell
from recalld.actors.index.manifest import GenerationCorrupt, IndexReason
from recalld.actors.index.problems import REBUILDING_AFTER_RESTORE, Problem
from recalld.actors.index.settings import IndexSettings
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import GenerationRow, Pointer, VectorStore

log = logging.getLogger("recalld.index")

LOAD_BYTES_PER_S = 50e6
"""A conservative reading speed for checksumming a generation at start (bytes per second)."""


class PointerFollower:
    """The index manager's side that follows the pointer (one event loop; no lock needed).

    Guarantees: only a generation that verifies here (`verify_here`: the builder's files against
    the generation's row, or a copy against the digest recorded for it) is handed to `swap`;
    a directory that is not here at all is copied, never embedded again, and one that is here but
    fails is reported (`problem`) and never built over. `problem` says why the vector route has
    nothing to serve when it has nothing: no generation yet, a restore, a corrupt generation, a
    copy being built.
    """

    def __init__(
        self,
        store: VectorStore,
        settings: IndexSettings,
        spaces: dict[str, VectorSpace],
        builds: Builds,
        cell: HandleCell,
        *,
        swap: Callable[[Handle, str], None],
        member: str,
        copied: Callable[[], None],
    ) -> None:
        """`spaces`: the manager's (shared); `swap` makes a handle current; `copied` is called
        after each copy, built or failed."""
        self._store = store
        self._settings = settings
        self._spaces = spaces
        self._builds = builds
        self._cell = cell
        self._swap = swap
        self.copies = Copies(store, settings, spaces, member=member, done=copied)
        self.pointer: Pointer | None = None
        """The pointer when last read."""
        self.problem: Problem | None = (IndexReason.NO_VERIFIED_GENERATION, "no generation loaded yet")
        self._generation: Generation | None = None
        self._files: tuple[str, Files] | None = None
        """The generation last loaded, and whose files it is (the builder's, or a copy)."""
        self._awaiting: GenerationRow | None = None
        """The pointer's generation, while its directory is not here (its copy is being built)."""

    async def announce_load(self, extend_start: Callable[[float], None] | None) -> None:
        """Before the start-up load, tell the service manager how long it may take (systemd's
        EXTEND_TIMEOUT_USEC): checksumming and mapping run at roughly disk speed."""
        pointer = await self._store.pointer()
        if extend_start is None or pointer.current is None:
            return
        directory = self._settings.root / pointer.current.id
        size = await anyio.to_thread.run_sync(
            lambda: sum(f.stat().st_size for f in directory.glob("*") if f.is_file()) if directory.is_dir() else 0
        )
        extend_start(30.0 + size / LOAD_BYTES_PER_S)

    async def follow(self, tasks: TaskGroup | None = None) -> None:
        """Load the pointer's generation when it moved, or once its copy is here. Without
        `tasks` (at start, before the loop) a copy is not started: the first step starts it."""
        pointer = await self._store.pointer()
        if self.pointer is not None and pointer.version == self.pointer.version and self._awaiting is None:
            return
        self.pointer = pointer
        self._awaiting = None
        row = pointer.current
        if row is None:
            # A pointer that has moved (version > 0) and names nothing: only a restore does that,
            # which empties the generations' catalogue (daemon/store/backup.py).
            if pointer.version > 0 and self._cell.current() is None:
                self.problem = REBUILDING_AFTER_RESTORE
            return
        if self._generation is not None and self._generation.manifest.generation_id == row.id:
            return
        root = self._settings.root
        if not is_here(root, row.id):
            # Not damage: this daemon never had these files (another member built them). Build a
            # copy from the stored vectors; the handle serving keeps serving until it is loaded.
            self._awaiting = row
            copying = tasks is not None and self.copies.start(row, tasks)
            if self._cell.current() is None:
                why = "is being built" if copying or tasks is None else "failed and will be tried again"
                self.problem = (
                    IndexReason.GENERATION_COPY_BUILDING,
                    f"this daemon's own copy of generation {row.id} {why} from the stored vectors",
                )
            return
        generation = await self._load(row)
        if generation is None:
            # The current generation is damaged: serve the previous verified one if nothing is
            # serving yet, and have the builder replace the damaged one.
            self._builds.heal = True
            if self._cell.current() is None and pointer.previous is not None:
                previous = await self._store.generation(pointer.previous)
                if previous is not None and previous.state == "verified" and is_here(root, previous.id):
                    generation = await self._load(previous)
            if generation is None:
                return
        self._spaces.setdefault(generation.manifest.space_id, generation.manifest.space)
        self._swap(Handle.of(generation), f"loaded generation {generation.manifest.generation_id}")

    async def _load(self, row: GenerationRow) -> Generation | None:
        """Verify and adopt a generation (the builder's files or a recorded copy, `verify_here`),
        or report it corrupt and keep serving."""
        try:
            generation, files = await verify_here(self._store, self._settings.root, row)
        except GenerationCorrupt as exc:
            self.problem = (IndexReason.VECTOR_INDEX_CORRUPT, str(exc))
            log.error("generation %s is corrupt: %s; keeping the previous handle", row.id, exc)
            return None
        self._generation = generation
        self._files = (row.id, files)
        self.problem = None
        return generation

    def serving(self, caught_up_at: float | None) -> dict[str, dict[str, object]]:
        """Which generation this daemon serves and how far it lags: `serving.generation` (the
        handle's base; None while it holds a delta alone), `serving.files` (`builder`: the
        builder's files, checked against the generation's row; `copy`: a copy built from the
        stored vectors, checked against its own recorded digest), `serving.building` (the
        generation whose copy is being built here); `lag.behind` (the pointer, when last read,
        names a generation not served here yet) and `lag.seconds` (every vector stored in
        PostgreSQL more than this long ago is in the handle: `caught_up_at` is the anyio time
        the last refresh that took in every one began; None before the first)."""
        handle = self._cell.current()
        served = handle.base.generation_id if handle is not None and handle.base is not None else None
        files = self._files[1] if self._files is not None and self._files[0] == served else None
        current = self.pointer.current.id if self.pointer is not None and self.pointer.current else None
        since = None if caught_up_at is None else max(0.0, anyio.current_time() - caught_up_at)
        return {
            "serving": {"generation": served, "files": files, "building": self.copies.building},
            "lag": {
                "behind": current is not None and current != served,
                "seconds": None if since is None else round(since, 3),
            },
        }
