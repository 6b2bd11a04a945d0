"""Listing a generations directory for the GC sweeper: installed generations and leftovers.

A name listed here only says the directory exists: whether it is a valid generation is decided
by `recalld.actors.index.generation.load_generation` against its pointer row.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Collection, Iterator
from pathlib import Path

from recalld.actors.index.manifest import TEMP_PREFIX, is_valid_generation_id


def list_generation_dirs(root: Path) -> list[str]:
    """Names of installed generation directories under `root`, sorted; never temp directories.

    A name here only says the directory exists: whether it is a valid generation is decided by
    `load_generation` against its pointer row.
    """
    return sorted(name for name in _entries(root) if is_valid_generation_id(name) and (root / name).is_dir())


def orphaned_temp_dirs(
    root: Path, older_than_s: float, *, known: Collection[str] | None = None, now: float | None = None
) -> list[Path]:
    """Directories under `root` nothing will ever use, unchanged for more than `older_than_s` s.

    Always the build directories (`.tmp-*`): a build in progress touches its directory after
    every batch, so a grace period longer than the slowest write step never lists a live build.
    With `known` (the generation ids that have a pointer row), also installed generation
    directories no row names: a build renamed into place whose row was never written. Oldest
    first; `now` is wall-clock seconds (`time.time()`), for tests.
    """
    current = time.time() if now is None else now
    found: list[tuple[float, Path]] = []
    for name in _entries(root):
        temp = name.startswith(TEMP_PREFIX)
        unrecorded = known is not None and is_valid_generation_id(name) and name not in known
        if not (temp or unrecorded):
            continue
        path = root / name
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode) and current - st.st_mtime > older_than_s:
            found.append((st.st_mtime, path))
    return [path for _, path in sorted(found)]


def _entries(root: Path) -> Iterator[str]:
    try:
        with os.scandir(root) as it:
            yield from (entry.name for entry in it)
    except FileNotFoundError:
        return
