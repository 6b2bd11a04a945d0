"""A scripted OpenAI-compatible chat server (`POST /v1/chat/completions`) on loopback, aiohttp,
for the dispute resolver's tests: real wire format, logprobs included.

The answer depends on the characteristic the request asks about (read from the user message
the resolver sends), so one server scripts several disputes at once.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio

from tests.support.loopback import loopback_server


@dataclass(frozen=True)
class Reply:
    kind: str = "answer"
    """answer | logprobs (the chosen value's tokens carry `probability`) | garbage | slow | http500"""
    value: str = ""
    confidence: float = 0.9
    probability: float = 1.0
    delay_s: float = 0.0


@dataclass
class ChatService:
    script: dict[str, Reply] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    formats: frozenset[str | None] | None = None
    """The `response_format` types this server takes (None: any); others are answered 500 naming
    `response_format`, as llama-cpp-python's server does."""
    in_flight: int = 0
    most_in_flight: int = 0
    """The most requests the threaded server was answering at once."""

    def refuses(self, body: dict[str, Any]) -> bool:
        asked = body.get("response_format", {}).get("type") if body.get("response_format") else None
        return self.formats is not None and asked not in self.formats

    def reply_for(self, body: dict[str, Any]) -> Reply:
        asked = json.loads(body["messages"][-1]["content"])
        return self.script[asked["characteristic"]]

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
        if reply.kind == "logprobs":
            head, _, tail = content.partition(reply.value)
            pieces = [(head, 0.0), (reply.value, math.log(reply.probability)), (tail, -0.01)]
            choice["logprobs"] = {
                "content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []} for t, lp in pieces]
            }
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
        if service.refuses(body):
            # as llama-cpp-python's server answers its validation error for json_schema
            return web.Response(status=500, text='{"error": {"message": "body.response_format.type: literal_error"}}')
        reply = service.reply_for(body)
        if reply.delay_s:
            await anyio.sleep(reply.delay_s)
        if reply.kind == "http500":
            return web.Response(
                status=500, text='{"error": {"message": "overloaded"}}', content_type="application/json"
            )
        return web.json_response(service.completion(body, reply))

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
                service.in_flight += 1
                service.most_in_flight = max(service.most_in_flight, service.in_flight)
            reply = service.reply_for(body)
            if reply.delay_s:
                time.sleep(reply.delay_s)
            with lock:
                service.in_flight -= 1
            status, answer = (
                (500, {"error": {"message": "overloaded"}})
                if reply.kind == "http500"
                else (200, service.completion(body, reply))
            )
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
