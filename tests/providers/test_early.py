"""`load_early`: which in-process models a configuration runs, each loading on its own from the
moment `serve` asks, before the store is opened (the real models)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from daemon.config import build
from daemon.providers.early import load_early

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
    deadline = time.monotonic() + timeout
    while not model.loaded:
        assert time.monotonic() < deadline, f"{model.label} did not load on its own in {timeout:.0f} s"
        time.sleep(0.05)  # polling for the condition above, not a barrier


@pytest.mark.parametrize(("document", "recall", "title"), CASES)
def test_the_configured_models_load_on_their_own(document: dict[str, Any], recall: bool, title: bool) -> None:
    early = load_early(build(document, {}))
    assert (early.recall is not None, early.title is not None) == (recall, title)
    for model in (early.recall, early.title):
        if model is not None:
            wait_loaded(model)
            model.unload()
