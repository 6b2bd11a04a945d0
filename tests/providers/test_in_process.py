"""What every in-process model shares (`recalld.providers.in_process`): the early load that the
daemon starts while it assembles, which the embedder's start waits for instead of repeating."""

from __future__ import annotations

import numpy as np
import pytest

from recalld.providers.duplicates_model import DIMENSION, TitleModelProvider

pytestmark = pytest.mark.anyio


class CountedTitleModel(TitleModelProvider):
    """The real title model, counting its loads (each one reads its weights afresh)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0

    def load(self) -> None:
        self.loads += 1
        super().load()


async def test_an_early_load_is_waited_for_by_the_start_not_repeated() -> None:
    provider = CountedTitleModel()
    provider.start_loading()
    provider.start_loading()  # a second call starts nothing more
    # entered at once, while the early load is still reading the weights: it waits for that load
    async with provider:
        assert provider.loaded and provider.loads == 1
        batch = await provider.embed(["Invoices are due in 30 days"], timeout=30.0)
        assert np.asarray(batch.vectors).shape == (1, DIMENSION)
    assert provider.loads == 1 and not provider.loaded


async def test_a_model_not_loaded_early_loads_when_its_embedder_starts() -> None:
    provider = CountedTitleModel()
    async with provider:
        assert provider.loaded and provider.loads == 1
