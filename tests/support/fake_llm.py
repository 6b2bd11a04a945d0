"""A scripted OpenAI-compatible chat server (`POST /v1/chat/completions`) on loopback, for the
dispute resolver's tests: real wire format, logprobs included.

The answer depends on the characteristic the request asks about (read from the user message
the resolver sends), so one server scripts several disputes at once. A `ServerDialect` makes
the server speak as one real server does: what it refuses, with that server's own error body,
and whether it answers logprobs (`REASONING`, `llama_cpp`, `ollama`, `DEEPSEEK`). A gate
(`ChatService.gates`) holds the answer to one characteristic until the test opens it, for
races with an answer in flight.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import anyio.to_thread

from tests.support.loopback import loopback_server

GATE_TIMEOUT_S = 120.0
"""How long a gated answer waits for its gate at most (a test that never opens it fails)."""

Answer = tuple[int, Any]
"""An HTTP status and the JSON body answered."""


@dataclass(frozen=True)
class Reply:
    kind: str = "answer"
    """answer | logprobs (the chosen value's tokens carry `probability`) | garbage | slow | http500"""
    value: str = ""
    confidence: float = 0.9
    probability: float = 1.0
    delay_s: float = 0.0


@dataclass(frozen=True)
class ServerDialect:
    """How one real server takes a request: `refuse` answers what it does not take with the
    server's own error (None: it takes the request); `logprobs` whether it answers them when
    asked; `token_ids` whether its logprob tokens carry their id (llama.cpp's do)."""

    name: str
    refuse: Callable[[dict[str, Any]], Answer | None]
    logprobs: bool = True
    token_ids: bool = False


def _reasoning_refusal(body: dict[str, Any]) -> Answer | None:
    # OpenAI's reasoning family: only the default temperature, no logprobs (their own bodies)
    if "temperature" in body and body["temperature"] != 1:
        return 400, {
            "error": {
                "message": f"Unsupported value: 'temperature' does not support {body['temperature']} with this"
                " model. Only the default (1) value is supported.",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "unsupported_value",
            }
        }
    if body.get("logprobs") or "top_logprobs" in body:
        return 400, {
            "error": {
                "message": "Unsupported parameter: 'logprobs' is not supported with this model.",
                "type": "invalid_request_error",
                "param": "logprobs",
                "code": None,
            }
        }
    return None


REASONING = ServerDialect("openai-reasoning", _reasoning_refusal, logprobs=False)


def llama_cpp(n_ctx: int = 4096) -> ServerDialect:
    """llama.cpp's llama-server: takes json_schema (turned into a grammar) and logprobs (its
    `top_logprobs` only with `logprobs`); errors are `{"error": {"code", "message", "type"}}`.
    A prompt longer than `n_ctx` tokens (about 4 characters each) is refused as it refuses it."""

    def refuse(body: dict[str, Any]) -> Answer | None:
        if body.get("top_logprobs") is not None and not body.get("logprobs"):
            return 400, {
                "error": {
                    "code": 400,
                    "message": "top_logprobs requires logprobs to be set to true",
                    "type": "invalid_request_error",
                }
            }
        kind = (body.get("response_format") or {}).get("type", "")
        if kind not in ("", "text", "json_object", "json_schema"):
            return 400, {
                "error": {
                    "code": 400,
                    "message": f'response_format type must be one of "text" or "json_object", but got: {kind}',
                    "type": "invalid_request_error",
                }
            }
        tokens = len(json.dumps(body["messages"])) // 4
        if tokens > n_ctx:
            return 400, {
                "error": {
                    "code": 400,
                    "message": f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens),"
                    " try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": tokens,
                    "n_ctx": n_ctx,
                }
            }
        return None

    return ServerDialect("llama.cpp", refuse, logprobs=True, token_ids=True)


def ollama(models: frozenset[str]) -> ServerDialect:
    """Ollama's /v1 (before it answered logprobs): takes json_schema as its `format`, ignores
    `logprobs`; a model it has not pulled is a 404 in its OpenAI-shaped error."""

    def refuse(body: dict[str, Any]) -> Answer | None:
        if body.get("model") not in models:
            return 404, {
                "error": {
                    "message": f'model "{body.get("model")}" not found, try pulling it first',
                    "type": "api_error",
                    "param": None,
                    "code": None,
                }
            }
        return None

    return ServerDialect("ollama", refuse, logprobs=False)


def _deepseek_refusal(body: dict[str, Any]) -> Answer | None:
    # DeepSeek's chat endpoint: JSON mode (json_object) only, logprobs answered
    if (body.get("response_format") or {}).get("type") == "json_schema":
        return 400, {
            "error": {
                "message": "This response_format type is unavailable now",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_request_error",
            }
        }
    return None


DEEPSEEK = ServerDialect("deepseek", _deepseek_refusal, logprobs=True)


@dataclass
class ChatService:
    script: dict[str, Reply] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    formats: frozenset[str | None] | None = None
    """The `response_format` types this server takes (None: any); others are answered 500 naming
    `response_format`, as llama-cpp-python's server does."""
    dialect: ServerDialect | None = None
    gates: dict[str, threading.Event] = field(default_factory=dict)
    """characteristic -> an event its answer waits for (at most GATE_TIMEOUT_S)."""
    answered: list[str] = field(default_factory=list)
    """The characteristics answered 200, in order, once each answer is on its way."""
    in_flight: int = 0
    most_in_flight: int = 0
    """The most requests the threaded server was answering at once."""

    def refusal(self, body: dict[str, Any]) -> Answer | None:
        """What the server answers before it looks at the question, if it refuses the request."""
        asked = body.get("response_format", {}).get("type") if body.get("response_format") else None
        if self.formats is not None and asked not in self.formats:
            # as llama-cpp-python's server answers its validation error for json_schema
            return 500, {"error": {"message": "body.response_format.type: literal_error"}}
        return self.dialect.refuse(body) if self.dialect is not None else None

    def reply_for(self, body: dict[str, Any]) -> Reply:
        asked = json.loads(body["messages"][-1]["content"])
        return self.script[asked["characteristic"]]

    def gate_for(self, body: dict[str, Any]) -> threading.Event | None:
        return self.gates.get(json.loads(body["messages"][-1]["content"])["characteristic"])

    def answer(self, body: dict[str, Any], reply: Reply) -> Answer:
        if reply.kind == "http500":
            return 500, {"error": {"message": "overloaded"}}
        self.answered.append(json.loads(body["messages"][-1]["content"])["characteristic"])
        return 200, self.completion(body, reply)

    def completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        if reply.kind == "garbage":
            content = "I would go with the first one, probably."
        else:
            content = json.dumps({"selected_value": reply.value, "confidence": reply.confidence})
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": content},
        }
        asked_logprobs = self.dialect is not None and self.dialect.logprobs and bool(body.get("logprobs"))
        if reply.kind == "logprobs" or asked_logprobs:
            head, _, tail = content.partition(reply.value)
            pieces = [(head, 0.0), (reply.value, math.log(reply.probability)), (tail, -0.01)]
            tokens: list[dict[str, Any]] = []
            for number, (text, logprob) in enumerate(pieces):
                token: dict[str, Any] = {"token": text, "logprob": logprob, "bytes": None, "top_logprobs": []}
                if self.dialect is not None and self.dialect.token_ids:
                    token = {"id": 1000 + number, **token, "bytes": list(text.encode())}
                tokens.append(token)
            choice["logprobs"] = {"content": tokens}
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", ""),
            "choices": [choice],
            "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
        }


@asynccontextmanager
async def chat_server(service: ChatService) -> AsyncIterator[str]:
    """Serve `service` on 127.0.0.1 (port 0); yields the base URL (ending in /v1). asyncio only."""
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        body = json.loads(await request.read())
        service.requests.append(body)
        refused = service.refusal(body)
        if refused is not None:
            return web.json_response(refused[1], status=refused[0])
        reply = service.reply_for(body)
        if reply.delay_s:
            await anyio.sleep(reply.delay_s)
        gate = service.gate_for(body)
        if gate is not None:
            await anyio.to_thread.run_sync(gate.wait, GATE_TIMEOUT_S)
        status, answer = service.answer(body, reply)
        return web.json_response(answer, status=status)

    async with loopback_server({"/v1/chat/completions": handler}) as url:
        yield f"{url}/v1"


@contextmanager
def threaded_chat_server(service: ChatService) -> Iterator[str]:
    """The same service in a thread (stdlib HTTP server), beside daemon processes under test;
    yields the base URL (ending in /v1)."""

    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                service.requests.append(body)
                refused = service.refusal(body)
                service.in_flight += 1
                service.most_in_flight = max(service.most_in_flight, service.in_flight)
            if refused is not None:
                status, answer = refused
            else:
                reply = service.reply_for(body)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                gate = service.gate_for(body)
                if gate is not None:
                    gate.wait(GATE_TIMEOUT_S)
                with lock:
                    status, answer = service.answer(body, reply)
            with lock:
                service.in_flight -= 1
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
