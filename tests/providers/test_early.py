"""`load_early`: which local models a configuration runs, each loading on its own from the moment
`serve` asks, before the store is opened (the real models): the recall model in a thread, the
title model in its process."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from recalld.config import build
from recalld.providers.early import EarlyModels, load_early
from recalld.providers.in_process import InProcessModel
from tests.support.waits import eventually

CASES = [
    # (config document, recall model made early, title model made early)
    ({}, True, True),
    ({"embedding": {"provider": "openai", "url": "http://127.0.0.1:9"}}, False, False),
    (
        {
            "embedding": {"provider": "openai", "url": "http://127.0.0.1:9"},
            "duplicates": {"model": "use-multilingual-v3"},
        },
        False,
        True,
    ),
    ({"duplicates": {"model": "embedding"}}, True, False),
    ({"embedding": {"provider": "none"}}, False, False),
]


def wait_loaded(model: Any, timeout: float = 60.0) -> None:
    """Until the model has loaded by itself: nothing here enters or calls it."""
    eventually(lambda: model.loaded, timeout, f"{model.label} loaded on its own")


@pytest.mark.parametrize(("document", "recall", "title"), CASES)
def test_the_configured_models_load_on_their_own(document: dict[str, Any], recall: bool, title: bool) -> None:
    early = load_early(build(document, {}))
    assert (early.recall is not None, early.title is not None) == (recall, title)
    if early.recall is not None:
        wait_loaded(early.recall)
        early.recall.unload()
    if early.title is not None:
        title = early.title
        assert title.pid is not None  # started, and loading, before anything enters it

        async def ready() -> None:
            async with title:
                assert title.loaded

        anyio.run(ready)


class HeldLoad(InProcessModel):
    """A model whose load lasts until the test lets it go: what a start that fails early meets."""

    label = "held model"

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self._loaded = False

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> None:
        self.go.wait(60)
        self._loaded = True

    def unload(self) -> None:
        self._loaded = False


def test_finishing_the_loads_waits_for_both_within_one_deadline() -> None:
    recall, title = HeldLoad(), HeldLoad()
    early = EarlyModels(recall=recall, title=title)  # type: ignore[arg-type]  # any in-process model
    recall.start_loading()
    title.start_loading()
    started = time.monotonic()
    assert not early.finish_loading(1.0)  # both still loading: not finished, and told so
    # One deadline for both: two loads each given the full second would take two.
    assert time.monotonic() - started < 1.9
    recall.go.set()
    title.go.set()
    assert early.finish_loading(60.0)
    assert recall.loaded and title.loaded
