"""The resolver's LLM client: `POST {url}/chat/completions` on any OpenAI-compatible server
(OpenAI, llama.cpp's server, vLLM, Ollama's /v1), over the daemon's shared httpx client.

Implements `actors.canonical.ports.ChatModel`. Each call has `[resolver] timeout_s` as its
deadline, both as the httpx timeout of every phase and as a cancel scope over the whole call, so
a server that trickles its answer cannot stretch it. Every failure is an `LlmFailure` with a
reason code; what the answer says is read by `actors.canonical.verdict.read_answer`.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx

from actors.canonical.ports import ChatAnswer, LlmFailure
from actors.canonical.verdict import Question, ResolverReason, messages, response_format


def _tokens(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class OpenAIChat:
    def __init__(self, http: httpx.AsyncClient, *, url: str, model: str, api_key: str, timeout_s: float) -> None:
        if not url:
            raise ValueError("[resolver] url is required when the resolver is enabled")
        self._http = http
        self._url = url.rstrip("/") + "/chat/completions"
        self._model = model
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout_s = timeout_s

    @property
    def model(self) -> str:
        return self._model

    def request(self, question: Question) -> dict[str, Any]:
        return {
            "model": self._model,
            "messages": messages(question),
            "response_format": response_format(question),
            "temperature": 0,
            # the probability of the chosen option, where the server gives it, is the confidence
            "logprobs": True,
            "top_logprobs": 1,
        }

    async def complete(self, question: Question) -> ChatAnswer:
        response: httpx.Response | None = None
        limit = self._timeout_s
        with anyio.move_on_after(limit) as scope:
            try:
                response = await self._http.post(
                    self._url, json=self.request(question), headers=self._headers, timeout=httpx.Timeout(limit)
                )
            except httpx.TimeoutException as exc:
                raise LlmFailure(ResolverReason.LLM_TIMEOUT, f"no answer within {limit:g}s") from exc
            except httpx.HTTPError as exc:
                raise LlmFailure(ResolverReason.LLM_ERROR, f"{self._url}: {exc!r}") from exc
        if scope.cancelled_caught or response is None:
            raise LlmFailure(ResolverReason.LLM_TIMEOUT, f"no answer within {limit:g}s")
        if response.status_code >= 400:
            raise LlmFailure(ResolverReason.LLM_ERROR, f"answered {response.status_code}: {response.text[:120]!r}")
        try:
            body = json.loads(response.content)
        except ValueError:
            raise LlmFailure(ResolverReason.LLM_ERROR, "the answer is not JSON") from None
        usage = body.get("usage") if isinstance(body, dict) else None
        usage = usage if isinstance(usage, dict) else {}
        model = body.get("model") if isinstance(body, dict) else None
        return ChatAnswer(
            body=body,
            model=self._model or (model if isinstance(model, str) else ""),
            prompt_tokens=_tokens(usage.get("prompt_tokens")),
            completion_tokens=_tokens(usage.get("completion_tokens")),
        )
