"""HTTP embedding providers: Ollama (`/api/embed`) and any OpenAI-compatible `/v1/embeddings`.

Both use the one `httpx.AsyncClient` the daemon owns (connection pooling across providers and
the resolver). The timeout each call gets is the budget the embedder hands down: it is the
httpx timeout for every phase and, as a whole, a cancel scope, so a server that trickles its
answer cannot stretch a call past it. Vectors are returned raw; the embedder validates them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self

import anyio
import httpx

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.ports.embedding import ProviderBatch, ProviderInfo

OLLAMA_DEFAULT_MODEL = "all-minilm"
"""Ollama's name for all-MiniLM-L6-v2, the same model the local provider runs."""
OPENAI_DEFAULT_MODEL = "text-embedding-3-small"
# Calls the embedder may have in flight: a remote server batches and queues on its own side.
HTTP_MAX_CONCURRENCY = 4
_BODY_EXCERPT = 120
# What OpenAI-compatible servers and Ollama answer for an input they will not embed (too long,
# malformed, refused content), as opposed to a request they will not serve (401, 403, 404).
_INPUT_REFUSALS = frozenset({400, 413, 422})


class _HTTPProvider:
    provider = ""

    def __init__(self, http: httpx.AsyncClient, *, url: str, model: str, api_key: str = "") -> None:
        if not url:
            raise ValueError(f"[embedding] url is required for provider {self.provider!r}")
        self._http = http
        self._url = url.rstrip("/")
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    def describe(self) -> ProviderInfo:
        return ProviderInfo(provider=self.provider, model=self._model, max_concurrency=HTTP_MAX_CONCURRENCY)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Nothing to release: the daemon owns (and closes) the shared client."""

    async def _post(self, path: str, body: dict[str, Any], timeout: float) -> Any:  # noqa: ASYNC109
        """POST JSON and return the decoded answer, mapping every failure to a reason code."""
        if timeout <= 0:
            raise EmbeddingError(Reason.PROVIDER_TIMEOUT, "no time left for the call")
        url = f"{self._url}{path}"
        response: httpx.Response | None = None
        with anyio.move_on_after(timeout) as scope:
            try:
                response = await self._http.post(url, json=body, headers=self._headers, timeout=httpx.Timeout(timeout))
            except httpx.TimeoutException as exc:
                raise EmbeddingError(Reason.PROVIDER_TIMEOUT, f"{self.provider}: {type(exc).__name__}") from exc
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.NetworkError) as exc:
                raise EmbeddingError(Reason.PROVIDER_UNAVAILABLE, f"{self.provider} at {url}: {exc!r}") from exc
            except httpx.HTTPError as exc:
                raise EmbeddingError(Reason.PROVIDER_ERROR, f"{self.provider}: {exc!r}") from exc
        if scope.cancelled_caught or response is None:
            raise EmbeddingError(Reason.PROVIDER_TIMEOUT, f"{self.provider} gave no answer within {timeout:.3f}s")
        status = response.status_code
        if status == 429:
            raise EmbeddingError(Reason.RATE_LIMITED, f"{self.provider} answered 429: {_excerpt(response)}")
        if status >= 500:
            raise EmbeddingError(Reason.PROVIDER_ERROR, f"{self.provider} answered {status}: {_excerpt(response)}")
        if status in _INPUT_REFUSALS:
            raise EmbeddingError(Reason.INPUT_REJECTED, f"{self.provider} answered {status}: {_excerpt(response)}")
        if status >= 400:
            raise EmbeddingError(Reason.PROVIDER_REJECTED, f"{self.provider} answered {status}: {_excerpt(response)}")
        try:
            # The stdlib decoder reads NaN/Infinity literals, so such a vector is reported as
            # not finite by validation rather than as an unreadable answer.
            return json.loads(response.content)
        except ValueError as exc:
            raise EmbeddingError(Reason.PROVIDER_RESPONSE_INVALID, f"{self.provider}: answer is not JSON") from exc


class OllamaProvider(_HTTPProvider):
    """`POST {url}/api/embed` with `{"model", "input": [...]}` → `{"embeddings", "prompt_eval_count"}`."""

    provider = "ollama"

    def __init__(self, http: httpx.AsyncClient, *, url: str, model: str = "", api_key: str = "") -> None:
        super().__init__(http, url=url, model=model or OLLAMA_DEFAULT_MODEL, api_key=api_key)

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        answer = await self._post("/api/embed", {"model": self._model, "input": list(texts)}, timeout)
        if not isinstance(answer, dict) or not isinstance(answer.get("embeddings"), list):
            raise EmbeddingError(Reason.PROVIDER_RESPONSE_INVALID, "ollama: answer has no `embeddings` list")
        return ProviderBatch(vectors=answer["embeddings"], input_tokens=_tokens(answer.get("prompt_eval_count")))


class OpenAIProvider(_HTTPProvider):
    """`POST {url}/embeddings` (url ends with /v1) → `{"data": [{"index", "embedding"}], "usage"}`.

    Vectors are put in input order by their `index`, whatever order the server lists them in.
    """

    provider = "openai"

    def __init__(self, http: httpx.AsyncClient, *, url: str, model: str = "", api_key: str = "") -> None:
        super().__init__(http, url=url, model=model or OPENAI_DEFAULT_MODEL, api_key=api_key)

    async def embed(self, texts: Sequence[str], *, timeout: float) -> ProviderBatch:  # noqa: ASYNC109
        # Only the two fields every OpenAI-compatible server knows; floats are the default.
        answer = await self._post("/embeddings", {"model": self._model, "input": list(texts)}, timeout)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise EmbeddingError(Reason.PROVIDER_RESPONSE_INVALID, "openai: answer has no `data` list")
        if len(data) != len(texts):
            raise EmbeddingError(
                Reason.EMBEDDING_COUNT_MISMATCH, f"openai: {len(data)} embeddings for {len(texts)} inputs"
            )
        ordered: list[Any] = [None] * len(texts)
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            if not isinstance(index, int) or not 0 <= index < len(texts) or ordered[index] is not None:
                raise EmbeddingError(
                    Reason.PROVIDER_RESPONSE_INVALID, f"openai: bad or repeated `index` {index!r} in `data`"
                )
            embedding = item.get("embedding")
            if not isinstance(embedding, list):
                raise EmbeddingError(Reason.PROVIDER_RESPONSE_INVALID, "openai: `embedding` is not a list of floats")
            ordered[index] = embedding
        usage = answer.get("usage")
        tokens = _tokens(usage.get("prompt_tokens")) if isinstance(usage, dict) else None
        return ProviderBatch(vectors=ordered, input_tokens=tokens)


def _tokens(value: object) -> int | None:
    """A reported token count, or None when the server reports none (or nonsense)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return int(value)


def _excerpt(response: httpx.Response) -> str:
    # Error bodies are the server's words about the request, not the inputs; keep them short.
    return response.text[:_BODY_EXCERPT].replace("\n", " ")
