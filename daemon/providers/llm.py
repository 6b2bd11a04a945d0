"""The resolver's LLM client: `POST {url}/chat/completions` on any OpenAI-compatible server
(OpenAI, llama.cpp's server, vLLM, Ollama's /v1), over the daemon's shared httpx client.

Implements `actors.canonical.ports.ChatModel`. Each call has `[resolver] timeout_s` as its
deadline, both as the httpx timeout of every phase and as a cancel scope over the whole call, so
a server that trickles its answer cannot stretch it. Every failure is an `LlmFailure` with a
reason code; what the answer says is read by `actors.canonical.verdict.read_answer`. A server
that refuses OpenAI's `json_schema` response format is asked in llama-cpp-python's dialect, then
with none (`FORMATS`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import httpx

from actors.canonical.ports import ChatAnswer, LlmFailure
from actors.canonical.verdict import Question, ResolverReason, messages, response_format

log = logging.getLogger("recalld.resolver")

FORMATS = ("json_schema", "json_object", None)
"""How `response_format` is asked, in order: OpenAI's JSON schema; llama-cpp-python's
`json_object` with a `schema`; none (the prompt alone asks for the JSON)."""
_FORMAT_REFUSALS = frozenset({400, 422})


def _refuses_format(response: httpx.Response) -> bool:
    """A 400 or 422, or an error that names `response_format`: llama-cpp-python's server answers
    its own validation error for `json_schema` with a 500 that says so."""
    if response.status_code in _FORMAT_REFUSALS:
        return True
    return response.status_code >= 500 and b"response_format" in response.content[:4096]


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
        self._dialect = 0

    @property
    def model(self) -> str:
        return self._model

    def request(self, question: Question, dialect: int = 0) -> dict[str, Any]:
        """The request body in `FORMATS[dialect]`."""
        body: dict[str, Any] = {
            "model": self._model,
            "messages": messages(question),
            "temperature": 0,
            # the probability of the chosen option, where the server gives it, is the confidence
            "logprobs": True,
            "top_logprobs": 1,
        }
        shape = FORMATS[dialect]
        if shape == "json_schema":
            body["response_format"] = response_format(question)
        elif shape == "json_object":
            body["response_format"] = {
                "type": "json_object",
                "schema": response_format(question)["json_schema"]["schema"],
            }
        return body

    async def complete(self, question: Question) -> ChatAnswer:
        limit = self._timeout_s
        response: httpx.Response | None = None
        with anyio.move_on_after(limit) as scope:
            response = await self._post(question, limit)
        if scope.cancelled_caught or response is None:
            raise LlmFailure(ResolverReason.LLM_TIMEOUT, f"no answer within {limit:g}s")
        return self._read(response)

    async def _post(self, question: Question, limit: float) -> httpx.Response:
        """POST in the dialect this server took last; a server that refuses a `response_format`
        (400, 422) is asked again in the next one, down to none at all, and remembered."""
        while True:
            try:
                response = await self._http.post(
                    self._url,
                    json=self.request(question, self._dialect),
                    headers=self._headers,
                    timeout=httpx.Timeout(limit),
                )
            except httpx.TimeoutException as exc:
                raise LlmFailure(ResolverReason.LLM_TIMEOUT, f"no answer within {limit:g}s") from exc
            except httpx.HTTPError as exc:
                raise LlmFailure(ResolverReason.LLM_ERROR, f"{self._url}: {exc!r}") from exc
            if _refuses_format(response) and self._dialect + 1 < len(FORMATS):
                log.info(
                    "the LLM server refused response_format %s (%d); trying %s",
                    FORMATS[self._dialect],
                    response.status_code,
                    FORMATS[self._dialect + 1],
                )
                self._dialect += 1
                continue
            return response

    def _read(self, response: httpx.Response) -> ChatAnswer:
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
