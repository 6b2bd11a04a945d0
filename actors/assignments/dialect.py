"""The dialects the resolver speaks to OpenAI-compatible chat endpoints, and how it reads a refusal.

Pure. A `Dialect` is what one endpoint and model take: the `response_format` it is asked in
(`FORMATS`: OpenAI's JSON schema, then JSON mode carrying the same schema, which llama.cpp turns
into a grammar, then none, the prompt alone asking for the JSON) and the request parameters it
refused (`temperature`; `logprobs`, with `top_logprobs`, which needs it). `request_body` writes
a request in a dialect; `read_refusal` reads an error answer; `after_refusal` says which
dialect to try next, or None when the refusal is not one a smaller request can meet.

What is read, in order:

- only a 400 or 422, or a 5xx whose message names `response_format` or a JSON schema (older
  llama.cpp and llama-cpp-python answer their own validation of it with a 500), can be a
  refusal; a 401, 404 (Ollama's model not pulled), 429 or other fault is not;
- the parameter the server names: OpenAI's and Ollama's `error.param`
  (`response_format.json_schema` counts as `response_format`), FastAPI's `detail[].loc`
  (vLLM, llama-cpp-python); else the one parameter of the request the message names
  (llama.cpp's errors have no `param`); a message about `response_format` or a JSON schema
  names `response_format` (DeepSeek: "This response_format type is unavailable now");
- a refused `response_format` moves one step down `FORMATS`; a refused `temperature` or
  `logprobs` is dropped; anything else (a parameter the request cannot do without, a refusal
  naming none, one already met) is not retried.

Every step makes the request strictly smaller, so one call makes at most
`len(FORMATS) + len(DROPPABLE)` requests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from recalld.actors.assignments.verdict import Question, messages, response_format

FORMATS: tuple[str | None, ...] = ("json_schema", "json_object", None)
"""How `response_format` is asked, in order of preference."""

DROPPABLE: Mapping[str, frozenset[str]] = {
    "temperature": frozenset({"temperature"}),  # the server's default then (1 on reasoning models)
    "logprobs": frozenset({"logprobs", "top_logprobs"}),  # top_logprobs is refused without logprobs
    "top_logprobs": frozenset({"top_logprobs"}),
}
"""A parameter a server may refuse -> the parameters the request then goes without. Without
logprobs the confidence is the model's own number (`recalld.actors.assignments.verdict.read_answer`)."""

RESPONSE_FORMAT = "response_format"
_FORMAT_WORDS = re.compile(r"response_format|json_schema|json schema", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Dialect:
    """What one endpoint and model take. The default is OpenAI's full request."""

    format: int = 0
    """Index into `FORMATS`."""
    dropped: frozenset[str] = frozenset()

    def describe(self) -> str:
        shape = FORMATS[self.format] or "no response_format"
        return f"{shape}, without {', '.join(sorted(self.dropped))}" if self.dropped else shape


@dataclass(frozen=True, slots=True)
class Refusal:
    param: str | None
    """The request parameter the server refused (its top-level name), None when it named none."""
    message: str


def request_body(model: str, question: Question, dialect: Dialect) -> dict[str, Any]:
    """The `chat/completions` request for `question` in `dialect`."""
    body: dict[str, Any] = {"model": model, "messages": messages(question)}
    if "temperature" not in dialect.dropped:
        body["temperature"] = 0
    if "logprobs" not in dialect.dropped:
        # the probability of the chosen option, where the server gives it, is the confidence
        body["logprobs"] = True
    if "top_logprobs" not in dialect.dropped:
        # one alternative, the fewest every server takes: llama.cpp computes 20 without it
        body["top_logprobs"] = 1
    shape = FORMATS[dialect.format]
    if shape == "json_schema":
        body["response_format"] = response_format(question)
    elif shape == "json_object":
        body["response_format"] = {"type": "json_object", "schema": response_format(question)["json_schema"]["schema"]}
    return body


def _error(body: Any) -> tuple[str | None, str]:
    """(param, message) as the error body states them, in any of the shapes servers use."""
    if not isinstance(body, dict):
        return None, ""
    error = body.get("error")
    if isinstance(error, dict):  # OpenAI, Ollama, llama.cpp, DeepSeek
        param, message = error.get("param"), error.get("message")
        return (param if isinstance(param, str) and param else None), (message if isinstance(message, str) else "")
    if isinstance(error, str):  # Ollama's own API, some proxies
        return None, error
    detail = body.get("detail")
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):  # FastAPI validation (422)
        loc, message = detail[0].get("loc"), detail[0].get("msg")
        param = loc[1] if isinstance(loc, list) and len(loc) > 1 and loc[0] == "body" else None
        return (param if isinstance(param, str) else None), (message if isinstance(message, str) else "")
    message = body.get("message")  # vLLM: {"object": "error", "message", "type", "param", "code"}
    param = body.get("param")
    return (param if isinstance(param, str) and param else None), (message if isinstance(message, str) else "")


def _root(param: str) -> str:
    """`response_format.json_schema` -> `response_format`, `messages[1].content` -> `messages`."""
    return re.split(r"[.\[]", param, maxsplit=1)[0]


def _named(message: str, sent: Mapping[str, Any]) -> str | None:
    """The one parameter `message` names among those the request sent and could go without (or
    `response_format`), if it names exactly one."""
    if _FORMAT_WORDS.search(message):
        return RESPONSE_FORMAT
    found = {name for name in DROPPABLE if name in sent and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", message)}
    return found.pop() if len(found) == 1 else None


def read_refusal(status: int, content: bytes, sent: Mapping[str, Any]) -> Refusal | None:
    """The refusal in an error answer to the request `sent`, or None when the answer is not one
    (a success, a fault of the server, a missing model or key, a rate limit)."""
    if status < 400:
        return None
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    param, message = _error(body)
    if status >= 500:
        if not _FORMAT_WORDS.search(message or content[:4096].decode("utf-8", "replace")):
            return None
        return Refusal(RESPONSE_FORMAT, message)
    if status not in (400, 422):
        return None
    if param is not None:
        return Refusal(_root(param), message)
    return Refusal(_named(message, sent), message)


def after_refusal(dialect: Dialect, refusal: Refusal) -> Dialect | None:
    """The dialect to ask in after `refusal`, or None when no smaller request meets it."""
    if refusal.param == RESPONSE_FORMAT:
        if dialect.format + 1 >= len(FORMATS):
            return None
        return replace(dialect, format=dialect.format + 1)
    drop = DROPPABLE.get(refusal.param or "")
    if drop is None or drop <= dialect.dropped:
        return None  # nothing the request can go without, or refused again without it
    return replace(dialect, dropped=dialect.dropped | drop)
