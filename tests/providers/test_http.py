"""Ollama and OpenAI providers against a real aiohttp server on loopback, with injected faults."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import numpy as np
import pytest

from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.embedding.validation import validate_batch
from recalld.providers.http import OllamaProvider, OpenAIProvider
from tests.support.embedding_service import EmbeddingService, aiohttp_server, tokens

pytestmark = pytest.mark.anyio

TEXTS = ["first input", "the second input is longer", "third"]


@pytest.fixture
def service() -> EmbeddingService:
    return EmbeddingService(dimension=8)


@pytest.fixture
async def url(service: EmbeddingService) -> AsyncIterator[str]:
    async with aiohttp_server(service) as base:
        yield base


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def providers(http: httpx.AsyncClient, url: str) -> list[Any]:
    return [
        OllamaProvider(http, url=url, model="all-minilm"),
        OpenAIProvider(http, url=f"{url}/v1", model="text-embedding-3-small", api_key="sk-test"),
    ]


def check(service: EmbeddingService, vectors: Any, texts: list[str]) -> None:
    matrix = validate_batch(vectors, expected_count=len(texts), dimension=8, normalized=True)
    assert np.allclose(matrix, [service.vector(t) for t in texts], atol=1e-6)


async def test_ollama_wire_format(service: EmbeddingService, url: str, http: httpx.AsyncClient) -> None:
    provider = OllamaProvider(http, url=url, model="all-minilm")
    async with provider:
        batch = await provider.embed(TEXTS, timeout=5.0)
    check(service, batch.vectors, TEXTS)
    assert batch.input_tokens == sum(tokens(t) for t in TEXTS)  # prompt_eval_count
    assert service.calls[0].path == "/api/embed"
    assert (service.calls[0].inputs, service.calls[0].model) == (TEXTS, "all-minilm")
    assert service.calls[0].authorization is None
    assert provider.describe().provider == "ollama"


async def test_openai_wire_format_and_bearer(service: EmbeddingService, url: str, http: httpx.AsyncClient) -> None:
    provider = OpenAIProvider(http, url=f"{url}/v1", model="text-embedding-3-small", api_key="sk-test")
    batch = await provider.embed(TEXTS, timeout=5.0)
    check(service, batch.vectors, TEXTS)
    assert batch.input_tokens == sum(tokens(t) for t in TEXTS)  # usage.prompt_tokens
    assert service.calls[0].path == "/v1/embeddings"
    assert service.calls[0].authorization == "Bearer sk-test"


async def test_openai_honours_index_order(service: EmbeddingService, url: str, http: httpx.AsyncClient) -> None:
    service.fail_next("reversed")
    batch = await OpenAIProvider(http, url=f"{url}/v1").embed(TEXTS, timeout=5.0)
    check(service, batch.vectors, TEXTS)


async def test_default_models(service: EmbeddingService, url: str, http: httpx.AsyncClient) -> None:
    await OllamaProvider(http, url=url).embed(["x"], timeout=5.0)
    await OpenAIProvider(http, url=f"{url}/v1").embed(["x"], timeout=5.0)
    assert [c.model for c in service.calls] == ["all-minilm", "text-embedding-3-small"]


@pytest.mark.parametrize("index", [0, 1], ids=["ollama", "openai"])
async def test_slow_server_times_out_at_the_deadline(
    service: EmbeddingService, url: str, http: httpx.AsyncClient, index: int
) -> None:
    service.fault, service.slow_s = "slow", 5.0
    provider = providers(http, url)[index]
    start = anyio.current_time()
    with pytest.raises(EmbeddingError) as caught:
        await provider.embed(TEXTS, timeout=0.3)
    elapsed = anyio.current_time() - start
    assert caught.value.reason is Reason.PROVIDER_TIMEOUT
    # not before the deadline; and ended by it, not by the server's 5 s (the bound is generous:
    # a loaded machine stalls the real clock's reader for hundreds of milliseconds)
    assert 0.3 - 0.01 <= elapsed < 0.3 + 2.0, elapsed


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("http500", Reason.PROVIDER_ERROR),
        ("http429", Reason.RATE_LIMITED),
        ("http401", Reason.PROVIDER_REJECTED),
        ("http400", Reason.INPUT_REJECTED),
        ("http422", Reason.INPUT_REJECTED),
        ("garbage", Reason.PROVIDER_RESPONSE_INVALID),
    ],
)
@pytest.mark.parametrize("index", [0, 1], ids=["ollama", "openai"])
async def test_http_faults_map_to_reasons(
    service: EmbeddingService, url: str, http: httpx.AsyncClient, index: int, fault: str, reason: Reason
) -> None:
    service.fail_next(fault)
    with pytest.raises(EmbeddingError) as caught:
        await providers(http, url)[index].embed(TEXTS, timeout=5.0)
    assert caught.value.reason is reason


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("wrong_dim", Reason.EMBEDDING_DIMENSION_MISMATCH),
        ("nan", Reason.EMBEDDING_NOT_FINITE),
        ("zero", Reason.EMBEDDING_ZERO_VECTOR),
        ("unnormalized", Reason.EMBEDDING_NOT_NORMALIZED),
        ("short", Reason.EMBEDDING_COUNT_MISMATCH),
    ],
)
@pytest.mark.parametrize("index", [0, 1], ids=["ollama", "openai"])
async def test_bad_vectors_never_pass_validation(
    service: EmbeddingService, url: str, http: httpx.AsyncClient, index: int, fault: str, reason: Reason
) -> None:
    service.fail_next(fault)
    with pytest.raises(EmbeddingError) as caught:
        # The provider hands vectors over raw (OpenAI catches a short `data` itself); the
        # embedder validates every batch exactly like this.
        batch = await providers(http, url)[index].embed(TEXTS, timeout=5.0)
        validate_batch(batch.vectors, expected_count=len(TEXTS), dimension=8, normalized=True)
    assert caught.value.reason is reason


async def test_openai_repeated_index_is_invalid(service: EmbeddingService, url: str, http: httpx.AsyncClient) -> None:
    service.fail_next("dup_index")
    with pytest.raises(EmbeddingError) as caught:
        await OpenAIProvider(http, url=f"{url}/v1").embed(TEXTS, timeout=5.0)
    assert caught.value.reason is Reason.PROVIDER_RESPONSE_INVALID


@pytest.mark.parametrize("index", [0, 1], ids=["ollama", "openai"])
async def test_missing_usage_is_none_not_zero(
    service: EmbeddingService, url: str, http: httpx.AsyncClient, index: int
) -> None:
    service.fail_next("no_usage")
    batch = await providers(http, url)[index].embed(TEXTS, timeout=5.0)
    assert batch.input_tokens is None


async def test_nobody_listening_is_unavailable(http: httpx.AsyncClient) -> None:
    async with aiohttp_server(EmbeddingService()) as gone:
        pass  # the port is closed again
    for provider in providers(http, gone):
        with pytest.raises(EmbeddingError) as caught:
            await provider.embed(TEXTS, timeout=5.0)
        assert caught.value.reason is Reason.PROVIDER_UNAVAILABLE


async def test_no_time_left_means_no_request(service: EmbeddingService, url: str, http: httpx.AsyncClient) -> None:
    with pytest.raises(EmbeddingError) as caught:
        await OllamaProvider(http, url=url).embed(TEXTS, timeout=0.0)
    assert caught.value.reason is Reason.PROVIDER_TIMEOUT
    assert service.calls == []


def test_url_is_required() -> None:
    with pytest.raises(ValueError):
        OllamaProvider(httpx.AsyncClient(), url="")
