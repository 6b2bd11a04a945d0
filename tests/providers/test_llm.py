"""The resolver's chat client (daemon/providers/llm.py) against a loopback OpenAI-compatible server."""

from __future__ import annotations

import httpx
import pytest

from actors.canonical.ports import LlmFailure
from actors.canonical.verdict import Option, Question, ResolverReason
from daemon.providers.llm import OpenAIChat
from tests.support.fake_llm import ChatService, Reply, chat_server

pytestmark = pytest.mark.anyio

Q = Question(
    "plug-1", "voltage", "V", (Option("230 V", ("230",), ("acme",), 0.5), Option("220 V", ("220 V",), ("globex",), 0.5))
)


async def answer_to(reply: Reply, timeout_s: float = 5.0) -> tuple[ChatService, object]:
    service = ChatService({"voltage": reply})
    async with chat_server(service) as url, httpx.AsyncClient() as http:
        chat = OpenAIChat(http, url=url, model="m1", api_key="k", timeout_s=timeout_s)
        try:
            return service, await chat.complete(Q)
        except LlmFailure as failure:
            return service, failure


async def test_a_completion_and_its_token_counts() -> None:
    service, answer = await answer_to(Reply(value="230 V", confidence=0.9))
    assert not isinstance(answer, LlmFailure)
    assert (answer.model, answer.prompt_tokens, answer.completion_tokens) == ("m1", 40, 12)  # type: ignore[attr-defined]
    [sent] = service.requests
    assert sent["model"] == "m1" and sent["logprobs"] is True and sent["temperature"] == 0
    assert sent["response_format"]["type"] == "json_schema"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Reply(kind="http500"), ResolverReason.LLM_ERROR),
        (Reply(kind="slow", value="230 V", delay_s=3.0), ResolverReason.LLM_TIMEOUT),
    ],
)
async def test_failures_carry_a_reason(reply: Reply, reason: ResolverReason) -> None:
    _, answer = await answer_to(reply, timeout_s=0.3)
    assert isinstance(answer, LlmFailure) and answer.reason is reason


async def test_an_unreachable_endpoint_is_an_error() -> None:
    async with httpx.AsyncClient() as http:
        chat = OpenAIChat(http, url="http://127.0.0.1:9/v1", model="m", api_key="", timeout_s=2.0)
        with pytest.raises(LlmFailure) as failed:
            await chat.complete(Q)
    assert failed.value.reason is ResolverReason.LLM_ERROR


def test_a_url_is_required() -> None:
    with pytest.raises(ValueError, match="url"):
        OpenAIChat(httpx.AsyncClient(), url="", model="m", api_key="", timeout_s=1.0)


async def test_a_server_refusing_json_schema_is_asked_in_its_own_dialect_then_without() -> None:
    service = ChatService({"voltage": Reply(value="230 V", confidence=0.9)}, formats=frozenset({None}))
    async with chat_server(service) as url, httpx.AsyncClient() as http:
        chat = OpenAIChat(http, url=url, model="m", api_key="", timeout_s=5.0)
        first = await chat.complete(Q)
        second = await chat.complete(Q)
    assert first.body["choices"][0]["message"]["content"] and second.body["choices"]
    shapes = [(r.get("response_format") or {}).get("type") for r in service.requests]
    assert shapes == ["json_schema", "json_object", None, None]  # remembered after the first call
    assert service.requests[1]["response_format"]["schema"]["properties"]["selected_value"]["enum"] == [
        "230 V",
        "220 V",
    ]
