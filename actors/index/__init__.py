"""The vector index: verified FAISS generations on disk and copy-on-write search handles.

`manifest` (pure) describes a generation and checks it against its PostgreSQL pointer row,
`layout` checks an index file's FAISS layout before FAISS reads it, `generation` builds and
loads generation directories, `listing` finds them and their leftovers for the sweeper,
`handle` serves searches over a generation, a delta and tombstones. The index-manager actor
drives these; nothing here touches PostgreSQL.
"""

from __future__ import annotations

from recalld.actors.index.generation import (
    Generation,
    GenerationBuildError,
    build_generation,
    load_generation,
    manifest_sha256,
)
from recalld.actors.index.handle import Handle, HandleCell, HandleClosed, HandleStats, Hit
from recalld.actors.index.idmap import IdMap
from recalld.actors.index.listing import list_generation_dirs, orphaned_temp_dirs
from recalld.actors.index.manifest import Corruption, Expected, GenerationCorrupt, IndexReason, Manifest

__all__ = [
    "Corruption",
    "Expected",
    "Generation",
    "GenerationBuildError",
    "GenerationCorrupt",
    "Handle",
    "HandleCell",
    "HandleClosed",
    "HandleStats",
    "Hit",
    "IdMap",
    "IndexReason",
    "Manifest",
    "build_generation",
    "list_generation_dirs",
    "load_generation",
    "manifest_sha256",
    "orphaned_temp_dirs",
]
