"""The resolver's LLM client: `POST {url}/chat/completions` on any OpenAI-compatible server
(OpenAI and its reasoning models, llama.cpp's server, Ollama's /v1, DeepSeek, vLLM), over the
daemon's shared httpx client.

Implements `recalld.actors.ports.assignments.ChatModel`. Each call has `[resolver] timeout_s` as its
deadline, both as the httpx timeout of every request and as a cancel scope over the whole call,
retries included, so neither a server that trickles its answer nor a chain of refusals can
stretch it. Every failure is an `LlmFailure` with a reason code; what the answer says is read by
`recalld.actors.assignments.verdict.read_answer`.

A server that refuses part of the request (a 400 naming `temperature`, `logprobs` or
`response_format`) is asked again within the same call in the next smaller dialect
(`recalld.actors.assignments.dialect`), and the dialect it took is remembered for the client's life: one
client is one endpoint and one model, so the next dispute does not pay the refusal again.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import httpx

from recalld.actors.assignments.dialect import Dialect, after_refusal, read_refusal, request_body
from recalld.actors.assignments.verdict import Question, ResolverReason
from recalld.actors.ports.assignments import ChatAnswer, LlmFailure

log = logging.getLogger("recalld.resolver")


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
        self.dialect = Dialect()
        """What this endpoint and model took last; learned from their refusals."""

    @property
    def model(self) -> str:
        return self._model

    def request(self, question: Question) -> dict[str, Any]:
        """The request body in the dialect this endpoint and model take."""
        return request_body(self._model, question, self.dialect)

    async def complete(self, question: Question) -> ChatAnswer:
        limit = self._timeout_s
        response: httpx.Response | None = None
        with anyio.move_on_after(limit) as scope:
            response = await self._post(question, limit)
        if scope.cancelled_caught or response is None:
            raise LlmFailure(ResolverReason.LLM_TIMEOUT, f"no answer within {limit:g}s")
        return self._read(response)

    async def _post(self, question: Question, limit: float) -> httpx.Response:
        """POST in the dialect this endpoint took last; a refusal that a smaller request meets is
        asked again in it (and remembered), any other answer is returned as it is."""
        while True:
            sent = self.request(question)
            try:
                response = await self._http.post(
                    self._url, json=sent, headers=self._headers, timeout=httpx.Timeout(limit)
                )
            except httpx.TimeoutException as exc:
                raise LlmFailure(ResolverReason.LLM_TIMEOUT, f"no answer within {limit:g}s") from exc
            except httpx.HTTPError as exc:
                raise LlmFailure(ResolverReason.LLM_ERROR, f"{self._url}: {exc!r}") from exc
            refusal = read_refusal(response.status_code, response.content, sent)
            smaller = None if refusal is None else after_refusal(self.dialect, refusal)
            if refusal is None or smaller is None:
                return response
            log.info(
                "the LLM endpoint refused %s (%d: %s); asking %s from now on",
                refusal.param,
                response.status_code,
                refusal.message[:200],
                smaller.describe(),
            )
            self.dialect = smaller

    def _read(self, response: httpx.Response) -> ChatAnswer:
        if response.status_code >= 400:
            raise LlmFailure(ResolverReason.LLM_ERROR, f"answered {response.status_code}: {response.text[:300]!r}")
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
