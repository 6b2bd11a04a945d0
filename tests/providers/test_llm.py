"""The resolver's chat client (daemon/providers/llm.py) against a loopback OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from recalld.actors.assignments.verdict import ConfidenceSource, Option, Question, ResolverReason, read_answer
from recalld.actors.ports.assignments import ChatAnswer, LlmFailure
from recalld.providers.llm import OpenAIChat
from tests.support.fake_llm import (
    DEEPSEEK,
    REASONING,
    ChatService,
    Reply,
    ServerDialect,
    chat_server,
    llama_cpp,
    ollama,
)

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


def shape(request: dict[str, Any]) -> tuple[str | None, bool, bool, bool]:
    """(response_format type, temperature sent, logprobs sent, top_logprobs sent)"""
    return (
        (request.get("response_format") or {}).get("type"),
        "temperature" in request,
        "logprobs" in request,
        "top_logprobs" in request,
    )


async def ask_twice(dialect: ServerDialect, model: str = "m1") -> tuple[ChatService, list[ChatAnswer | LlmFailure]]:
    """Two disputes' calls, one after the other, to a server of `dialect` through one client."""
    service = ChatService({"voltage": Reply(value="230 V", confidence=0.93, probability=0.6)}, dialect=dialect)
    answers: list[ChatAnswer | LlmFailure] = []
    async with chat_server(service) as url, httpx.AsyncClient() as http:
        chat = OpenAIChat(http, url=url, model=model, api_key="k", timeout_s=5.0)
        for _ in range(2):
            try:
                answers.append(await chat.complete(Q))
            except LlmFailure as failure:
                answers.append(failure)
    return service, answers


FULL = ("json_schema", True, True, True)


async def test_a_reasoning_model_is_asked_without_what_it_refuses_and_the_refusals_are_remembered() -> None:
    service, answers = await ask_twice(REASONING, model="o4-mini")
    # temperature refused, then logprobs (with top_logprobs, which needs it); the next dispute
    # goes straight to what the model takes
    assert [shape(r) for r in service.requests] == [
        FULL,
        ("json_schema", False, True, True),
        ("json_schema", False, False, False),
        ("json_schema", False, False, False),
    ]
    for answer in answers:
        assert isinstance(answer, ChatAnswer)
        verdict = read_answer(answer.body, Q)
        assert (verdict.selected_value, verdict.confidence_source) == ("230 V", ConfidenceSource.MODEL)
        assert verdict.confidence == 0.93


async def test_llama_cpp_takes_the_schema_and_logprobs_and_its_tokens_give_the_confidence() -> None:
    service, answers = await ask_twice(llama_cpp())
    assert [shape(r) for r in service.requests] == [FULL, FULL]
    assert service.requests[0]["top_logprobs"] == 1  # llama.cpp would compute 20 alternatives without it
    assert isinstance(answers[0], ChatAnswer)
    verdict = read_answer(answers[0].body, Q)
    assert verdict.confidence_source is ConfidenceSource.LOGPROBS
    assert verdict.confidence == pytest.approx(0.6)
    assert verdict.model_confidence == 0.93


async def test_a_llama_cpp_refusal_that_names_no_parameter_is_not_retried() -> None:
    service, answers = await ask_twice(llama_cpp(n_ctx=10))
    assert [shape(r) for r in service.requests] == [FULL, FULL]  # once per dispute, nothing dropped
    for answer in answers:
        assert isinstance(answer, LlmFailure) and answer.reason is ResolverReason.LLM_ERROR
        assert "exceeds the available context size" in str(answer)


async def test_ollama_takes_the_schema_ignores_logprobs_and_the_model_confidence_is_used() -> None:
    service, answers = await ask_twice(ollama(frozenset({"qwen3:8b"})), model="qwen3:8b")
    assert [shape(r) for r in service.requests] == [FULL, FULL]
    assert isinstance(answers[0], ChatAnswer)
    verdict = read_answer(answers[0].body, Q)
    assert (verdict.confidence, verdict.confidence_source) == (0.93, ConfidenceSource.MODEL)


async def test_an_ollama_model_not_pulled_is_an_error_not_a_refused_parameter() -> None:
    service, answers = await ask_twice(ollama(frozenset({"qwen3:8b"})), model="llama3.2")
    assert [shape(r) for r in service.requests] == [FULL, FULL]
    for answer in answers:
        assert isinstance(answer, LlmFailure) and answer.reason is ResolverReason.LLM_ERROR
        assert "try pulling it first" in str(answer)


async def test_a_server_refusing_json_schema_is_asked_in_json_mode_and_that_is_remembered() -> None:
    service, answers = await ask_twice(DEEPSEEK, model="deepseek-chat")
    json_mode = ("json_object", True, True, True)
    assert [shape(r) for r in service.requests] == [FULL, json_mode, json_mode]
    # the schema still travels, for servers whose JSON mode takes one (llama.cpp's)
    assert service.requests[1]["response_format"]["schema"]["properties"]["selected_value"]["enum"] == [
        "230 V",
        "220 V",
    ]
    assert isinstance(answers[1], ChatAnswer)
    assert read_answer(answers[1].body, Q).confidence_source is ConfidenceSource.LOGPROBS


def _refuses_temperature_always(body: dict[str, Any]) -> tuple[int, Any] | None:
    return 400, {"error": {"message": "temperature is not allowed", "type": "invalid_request_error",
                           "param": "temperature", "code": None}}  # fmt: skip


def _refuses_messages(body: dict[str, Any]) -> tuple[int, Any] | None:
    return 400, {
        "error": {
            "message": "Invalid 'messages[1].content': string too long.",
            "type": "invalid_request_error",
            "param": "messages[1].content",
            "code": "string_above_max_length",
        }
    }


@pytest.mark.parametrize(
    ("refuse", "requests"),
    [
        # the named parameter is dropped once; refused again without it, the call fails
        (_refuses_temperature_always, [FULL, ("json_schema", False, True, True)]),
        # a parameter the request cannot do without: no retry at all
        (_refuses_messages, [FULL]),
    ],
)
async def test_refusals_are_retried_a_bounded_number_of_times(
    refuse: Callable[[dict[str, Any]], tuple[int, Any] | None], requests: list[tuple[str | None, bool, bool, bool]]
) -> None:
    service = ChatService({"voltage": Reply(value="230 V")}, dialect=ServerDialect("strict", refuse))
    async with chat_server(service) as url, httpx.AsyncClient() as http:
        chat = OpenAIChat(http, url=url, model="m", api_key="", timeout_s=5.0)
        with pytest.raises(LlmFailure) as failed:
            await chat.complete(Q)
    assert failed.value.reason is ResolverReason.LLM_ERROR
    assert [shape(r) for r in service.requests] == requests
