from __future__ import annotations

import httpx
import pytest

from recalld.config import EmbeddingConfig
from recalld.providers import make_provider
from recalld.providers.http import OllamaProvider, OpenAIProvider
from recalld.providers.local import LocalProvider


@pytest.mark.parametrize(
    ("provider", "kind", "model"),
    [
        ("local", LocalProvider, "all-MiniLM-L6-v2-onnx-int8"),
        ("ollama", OllamaProvider, "all-minilm"),
        ("openai", OpenAIProvider, "text-embedding-3-small"),
    ],
)
def test_config_picks_the_provider(provider: str, kind: type, model: str) -> None:
    made = make_provider(EmbeddingConfig(provider=provider, url="http://127.0.0.1:1/v1"), httpx.AsyncClient())  # type: ignore[arg-type]
    assert isinstance(made, kind)
    assert made.describe().model == model


def test_none_means_no_provider() -> None:
    assert make_provider(EmbeddingConfig(provider="none"), httpx.AsyncClient()) is None


@pytest.mark.parametrize(
    "config",
    [EmbeddingConfig(provider="ollama"), EmbeddingConfig(provider="openai"), EmbeddingConfig(model="bge-small-en")],
    ids=["ollama-without-url", "openai-without-url", "local-with-another-model"],
)
def test_unusable_configuration_is_refused_at_start(config: EmbeddingConfig) -> None:
    with pytest.raises(ValueError):
        make_provider(config, httpx.AsyncClient())
