"""Adapters for the ports in `recalld.actors.ports`: embedding providers (local, Ollama, OpenAI), the LLM."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing a provider module must not need the whole config
    import httpx

    from recalld.actors.ports.embedding import EmbeddingProvider
    from recalld.config import EmbeddingConfig


def make_provider(config: EmbeddingConfig, http: httpx.AsyncClient) -> EmbeddingProvider | None:
    """The provider `[embedding] provider` names, or None for `none` (vector features off).

    `http` is the daemon's shared client (the local provider does not use it). Raises ValueError
    for a configuration no provider can work with (an HTTP provider without a url, a model the
    local provider does not ship).
    """
    if config.provider == "none":
        return None
    if config.provider == "local":
        from recalld.providers.local import LocalProvider

        return LocalProvider(model=config.model)
    from recalld.providers.http import OllamaProvider, OpenAIProvider

    kind = OllamaProvider if config.provider == "ollama" else OpenAIProvider
    return kind(http, url=config.url, model=config.model, api_key=config.api_key)
