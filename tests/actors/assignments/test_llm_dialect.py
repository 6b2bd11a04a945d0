"""The resolver's dialects (actors/assignments/dialect.py): how a refusal is read, which request
comes next, and that the degradation always ends."""

from __future__ import annotations

import json
from typing import Any

import pytest

from recalld.actors.assignments.dialect import (
    DROPPABLE,
    FORMATS,
    Dialect,
    Refusal,
    after_refusal,
    read_refusal,
    request_body,
)
from recalld.actors.assignments.verdict import Option, Question

Q = Question(
    "plug-1", "voltage", "V", (Option("230 V", ("230",), ("acme",), 0.5), Option("220 V", ("220",), ("b",), 0.5))
)
FULL = Dialect()
NO_TEMPERATURE = Dialect(dropped=frozenset({"temperature"}))
NO_LOGPROBS = Dialect(dropped=frozenset({"logprobs", "top_logprobs"}))
JSON_MODE, PROMPT_ONLY = Dialect(format=1), Dialect(format=2)

REASONING_TEMPERATURE = {
    "error": {
        "message": "Unsupported value: 'temperature' does not support 0 with this model. "
        "Only the default (1) value is supported.",
        "type": "invalid_request_error",
        "param": "temperature",
        "code": "unsupported_value",
    }
}
REASONING_LOGPROBS = {
    "error": {
        "message": "Unsupported parameter: 'logprobs' is not supported with this model.",
        "type": "invalid_request_error",
        "param": "logprobs",
        "code": None,
    }
}
OPENAI_SCHEMA = {
    "error": {
        "message": "Invalid schema for response_format 'dispute_verdict': 'minimum' is not permitted.",
        "type": "invalid_request_error",
        "param": "response_format.json_schema",
        "code": None,
    }
}
OPENAI_MESSAGES = {
    "error": {
        "message": "Invalid 'messages[1].content': string too long.",
        "type": "invalid_request_error",
        "param": "messages[1].content",
        "code": "string_above_max_length",
    }
}
LLAMA_CPP_OLD_FORMAT = {  # before llama.cpp took json_schema: a 500 server_error
    "error": {
        "code": 500,
        "message": 'response_format type must be one of "text" or "json_object", but got: json_schema',
        "type": "server_error",
    }
}
LLAMA_CPP_GRAMMAR = {
    "error": {
        "code": 400,
        "message": 'JSON schema conversion failed:\nUnrecognized schema: {"minimum":0}',
        "type": "invalid_request_error",
    }
}
LLAMA_CPP_CONTEXT = {
    "error": {
        "code": 400,
        "message": "request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 9412,
        "n_ctx": 8192,
    }
}
LLAMA_CPP_TOP_LOGPROBS = {
    "error": {
        "code": 400,
        "message": "top_logprobs requires logprobs to be set to true",
        "type": "invalid_request_error",
    }
}
OLLAMA_NOT_PULLED = {
    "error": {
        "message": 'model "llama3.2" not found, try pulling it first',
        "type": "api_error",
        "param": None,
        "code": None,
    }
}
OLLAMA_BAD_JSON = {
    "error": {
        "message": "json: cannot unmarshal string into Go struct field ChatCompletionRequest.temperature of type float64",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
}
DEEPSEEK_FORMAT = {
    "error": {
        "message": "This response_format type is unavailable now",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_request_error",
    }
}
FASTAPI_FORMAT = {"detail": [{"loc": ["body", "response_format", "type"], "msg": "Input should be 'text'"}]}
OVERLOADED = {"error": {"message": "overloaded"}}


# (name, status, body, the dialect asked in, the refused parameter read, the dialect asked next)
CASES: list[tuple[str, int, Any, Dialect, str | None, Dialect | None]] = [
    ("reasoning: temperature", 400, REASONING_TEMPERATURE, FULL, "temperature", NO_TEMPERATURE),
    (
        "reasoning: logprobs, then",
        400,
        REASONING_LOGPROBS,
        NO_TEMPERATURE,
        "logprobs",
        Dialect(dropped=frozenset({"temperature", "logprobs", "top_logprobs"})),
    ),
    ("reasoning: logprobs refused again without it", 400, REASONING_LOGPROBS, NO_LOGPROBS, "logprobs", None),
    ("openai: the schema", 400, OPENAI_SCHEMA, FULL, "response_format", JSON_MODE),
    ("openai: a parameter no request goes without", 400, OPENAI_MESSAGES, FULL, "messages", None),
    ("deepseek: json_schema", 400, DEEPSEEK_FORMAT, FULL, "response_format", JSON_MODE),
    ("json mode refused as well", 400, DEEPSEEK_FORMAT, JSON_MODE, "response_format", PROMPT_ONLY),
    ("no format left to drop", 400, DEEPSEEK_FORMAT, PROMPT_ONLY, "response_format", None),
    ("old llama.cpp: a 500 naming response_format", 500, LLAMA_CPP_OLD_FORMAT, FULL, "response_format", JSON_MODE),
    ("llama.cpp: a schema it cannot turn into a grammar", 400, LLAMA_CPP_GRAMMAR, FULL, "response_format", JSON_MODE),
    ("llama.cpp: the context size", 400, LLAMA_CPP_CONTEXT, FULL, None, None),
    ("llama.cpp: a message naming two parameters", 400, LLAMA_CPP_TOP_LOGPROBS, FULL, None, None),
    ("fastapi: a 422 at body.response_format", 422, FASTAPI_FORMAT, FULL, "response_format", JSON_MODE),
    ("ollama: a malformed request", 400, OLLAMA_BAD_JSON, FULL, "temperature", NO_TEMPERATURE),
]
NOT_REFUSALS: list[tuple[str, int, Any]] = [
    ("a success", 200, {"choices": []}),
    ("ollama: a model not pulled", 404, OLLAMA_NOT_PULLED),
    ("a fault of the server", 500, OVERLOADED),
    ("a bad key", 401, {"error": {"message": "Incorrect API key provided", "param": None}}),
    ("a rate limit", 429, {"error": {"message": "Rate limit reached", "param": None}}),
    ("a 503 that is not JSON", 503, "<html>upstream unavailable</html>"),
]


def encoded(body: Any) -> bytes:
    return body.encode() if isinstance(body, str) else json.dumps(body).encode()


@pytest.mark.parametrize(("name", "status", "body", "asked", "param", "following"), CASES, ids=[c[0] for c in CASES])
def test_a_refusal_and_the_dialect_asked_next(
    name: str, status: int, body: Any, asked: Dialect, param: str | None, following: Dialect | None
) -> None:
    refusal = read_refusal(status, encoded(body), request_body("m", Q, asked))
    assert refusal is not None
    assert refusal.param == param
    assert after_refusal(asked, refusal) == following


@pytest.mark.parametrize(("name", "status", "body"), NOT_REFUSALS, ids=[c[0] for c in NOT_REFUSALS])
def test_answers_that_are_not_refusals_of_the_request_shape(name: str, status: int, body: Any) -> None:
    assert read_refusal(status, encoded(body), request_body("m", Q, FULL)) is None


@pytest.mark.parametrize(
    ("dialect", "keys", "shape"),
    [
        (FULL, {"temperature", "logprobs", "top_logprobs", "response_format"}, "json_schema"),
        (NO_TEMPERATURE, {"logprobs", "top_logprobs", "response_format"}, "json_schema"),
        (NO_LOGPROBS, {"temperature", "response_format"}, "json_schema"),
        (JSON_MODE, {"temperature", "logprobs", "top_logprobs", "response_format"}, "json_object"),
        (PROMPT_ONLY, {"temperature", "logprobs", "top_logprobs"}, None),
    ],
)
def test_the_request_in_each_dialect(dialect: Dialect, keys: set[str], shape: str | None) -> None:
    body = request_body("m", Q, dialect)
    assert set(body) == {"model", "messages"} | keys
    assert (body.get("response_format") or {}).get("type") == shape
    if shape == "json_object":  # llama.cpp's JSON mode takes the schema along
        assert body["response_format"]["schema"]["properties"]["selected_value"]["enum"] == ["230 V", "220 V"]


@pytest.mark.parametrize("param", ["temperature", "logprobs", "top_logprobs", "response_format", "messages", None])
def test_the_degradation_always_ends(param: str | None) -> None:
    """A server that refuses the same thing forever is asked a bounded number of times."""
    dialect: Dialect | None = FULL
    asked = 0
    while dialect is not None:
        asked += 1
        assert asked <= len(FORMATS) + len(DROPPABLE)
        dialect = after_refusal(dialect, Refusal(param, "refused"))
    assert asked <= (len(FORMATS) if param == "response_format" else 2)
