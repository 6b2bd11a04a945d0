"""A generation is readable by the daemon alone, whatever umask the process runs under: its
id map names every namespace and its index holds the embedding vectors."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.generations import build, id_map_for, unit_vectors


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # a shell's default: files 0644, directories 0755
    yield
    os.umask(previous)


@pytest.mark.usefixtures("permissive_umask")
def test_a_generation_is_private_to_its_owner(tmp_path: Path) -> None:
    build(tmp_path, "g-1", unit_vectors(np.random.default_rng(3), 20, 8), id_map_for(np.arange(20)))
    generation = tmp_path / "g-1"
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in [generation, *generation.iterdir()]}
    assert modes == {"g-1": 0o700, "index.faiss": 0o600, "idmap.npz": 0o600, "manifest.json": 0o600}
