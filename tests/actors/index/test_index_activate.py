"""Rolling the pointer to a generation (`activate`): each refusal is its own domain error, which
the control socket maps to its status and code (404 not_found, 409 vector_index_corrupt,
vector_space_mismatch, conflict), and the pointer moves only when every check passed."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from recalld.actors.index.builds import Builds, GenerationNotFound, PointerMoved, SpaceMismatch
from recalld.actors.index.generation import build_generation
from recalld.actors.index.idmap import IdMap
from recalld.actors.index.manifest import GenerationCorrupt
from recalld.actors.index.settings import IndexSettings
from recalld.actors.ports.embedding import VectorSpace
from recalld.actors.ports.index import GenerationRow, Pointer
from tests.support.fakes import FakeVectorStore
from tests.support.generations import generation_row

pytestmark = [pytest.mark.anyio, pytest.mark.anyio_backends("asyncio", "trio")]

DIM = 4
BUILT_IN = VectorSpace(provider="test", model="a", dimension=DIM, normalized=True, template_version=1)
NEW_TEMPLATE = VectorSpace(provider="test", model="a", dimension=DIM, normalized=True, template_version=2)
OTHER_MODEL = VectorSpace(provider="test", model="b", dimension=DIM, normalized=True, template_version=1)


class RacedStore(FakeVectorStore):
    """Another daemon moves the pointer between `activate` reading it and moving it."""

    async def pointer(self) -> Pointer:
        seen = await super().pointer()
        self.db.version += 1
        return seen


async def add_generation(store: FakeVectorStore, root: Path, generation_id: str) -> GenerationRow:
    vectors = np.eye(DIM, dtype=np.float32)
    surrogates = list(range(1, DIM + 1))
    id_map = IdMap.from_rows(surrogates, [uuid.UUID(int=s) for s in surrogates], [1] * DIM, ["ns"] * DIM)
    manifest = build_generation(
        root,
        generation_id=generation_id,
        space=BUILT_IN,
        space_id=BUILT_IN.key,
        vectors=vectors,
        id_map=id_map,
        source_watermark=DIM,
        tombstone_watermark=0,
    )
    row = generation_row(root, manifest)
    await store.add_generation(row)
    return row


def corrupt(root: Path) -> None:
    index = root / "g-1" / "index.faiss"
    index.write_bytes(index.read_bytes()[:-8] + b"\0" * 8)


def nothing(root: Path) -> None:
    pass


Case = tuple[str, Callable[[Path], None], VectorSpace | None, type[FakeVectorStore], type[Exception] | None]

CASES: list[Case] = [
    ("g-1", nothing, BUILT_IN, FakeVectorStore, None),
    ("g-1", nothing, NEW_TEMPLATE, FakeVectorStore, None),  # a query of the new template can search it
    ("g-nope", nothing, BUILT_IN, FakeVectorStore, GenerationNotFound),
    ("g-1", corrupt, BUILT_IN, FakeVectorStore, GenerationCorrupt),
    ("g-1", nothing, OTHER_MODEL, FakeVectorStore, SpaceMismatch),
    ("g-1", nothing, None, FakeVectorStore, SpaceMismatch),  # no model configured: it can search nothing
    ("g-1", nothing, BUILT_IN, RacedStore, PointerMoved),
]


@pytest.mark.parametrize(
    ("generation_id", "damage", "query_space", "store_type", "refused"),
    CASES,
    ids=["activates", "new-template", "unknown", "corrupt", "other-model", "no-model", "pointer-moved"],
)
async def test_activate_moves_the_pointer_or_says_why_not(
    tmp_path: Path,
    generation_id: str,
    damage: Callable[[Path], None],
    query_space: VectorSpace | None,
    store_type: type[FakeVectorStore],
    refused: type[Exception] | None,
) -> None:
    store = store_type()
    await add_generation(store, tmp_path, "g-1")
    damage(tmp_path)
    published: list[str] = []
    builds = Builds(
        store,
        IndexSettings(root=tmp_path),
        {},
        new_generation_id=lambda: "unused",
        published=lambda: published.append("woken"),
    )
    act: Callable[[], Awaitable[GenerationRow]] = lambda: builds.activate(generation_id, query_space)  # noqa: E731
    if refused is None:
        row = await act()
        assert row.id == generation_id and store.db.current == generation_id
        assert published == ["woken"], "the followers are told the pointer moved"
        return
    with pytest.raises(refused):
        await act()
    assert store.db.current is None and published == []
