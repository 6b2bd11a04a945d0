"""A fake embedding service speaking the real Ollama and OpenAI wire formats, with faults.

`EmbeddingService.handle` is the whole behaviour; it is served two ways:
- `aiohttp_server()`: a real aiohttp server on 127.0.0.1, port 0 (asyncio);
- `mock_transport()`: an httpx transport in the shape of `httpx.MockTransport`, so the same
  provider code runs on trio (with its mock clock) too.
Vectors are deterministic per input text, so a test can check which vector went to whom.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import numpy as np

from tests.support.loopback import loopback_server

OK = "ok"
FAULTS = {
    OK,
    "slow",  # wait `delay` seconds, then answer normally
    "http500",
    "http429",
    "http401",
    "http400",
    "http422",
    "garbage",  # 200 with a body that is not JSON
    "wrong_dim",  # one more component than `dimension`
    "nan",  # the first vector's first component is NaN
    "zero",  # the first vector is all zeros
    "unnormalized",  # every vector scaled by 2
    "short",  # one vector fewer than inputs
    "reversed",  # OpenAI: `data` listed in reverse `index` order
    "dup_index",  # OpenAI: two items with index 0
    "no_usage",  # no token counts in the answer
}


@dataclass(frozen=True)
class Call:
    path: str
    inputs: list[str]
    model: str
    authorization: str | None


def tokens(text: str) -> int:
    """The server's own token count: words plus [CLS] and [SEP]."""
    return len(text.split()) + 2


class EmbeddingService:
    def __init__(self, dimension: int = 16) -> None:
        self.dimension = dimension
        self.calls: list[Call] = []
        self.faults: deque[str] = deque()
        """Faults for the next calls, one each; then `fault` applies."""
        self.fault = OK
        self.refuse: str | None = None
        """A call with an input containing this is answered 400, as a server refuses an input."""
        self.delay = 1.0
        self.in_flight = 0
        self.max_in_flight = 0

    def vector(self, text: str, dimension: int | None = None) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(dimension or self.dimension)
        return [float(x) for x in v / np.linalg.norm(v)]

    def fail_next(self, *faults: str) -> None:
        assert set(faults) <= FAULTS
        self.faults.extend(faults)

    def calls_to(self, path: str) -> list[Call]:
        return [c for c in self.calls if c.path == path]

    async def handle(self, path: str, authorization: str | None, body: bytes) -> tuple[int, bytes]:
        request = json.loads(body)
        inputs = request["input"] if isinstance(request["input"], list) else [request["input"]]
        self.calls.append(Call(path, inputs, request.get("model", ""), authorization))
        fault = self.faults.popleft() if self.faults else self.fault
        if self.refuse is not None and any(self.refuse in text for text in inputs):
            fault = "http400"
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if fault == "slow":
                await anyio.sleep(self.delay)
            return self._answer(path, request.get("model", ""), inputs, fault)
        finally:
            self.in_flight -= 1

    def _answer(self, path: str, model: str, inputs: list[str], fault: str) -> tuple[int, bytes]:
        if fault.startswith("http"):
            return int(fault[4:]), b'{"error": "injected fault"}'
        if fault == "garbage":
            return 200, b"<html>surprise</html>"
        width = self.dimension + 1 if fault == "wrong_dim" else self.dimension
        vectors = [self.vector(text, width) for text in inputs]
        if fault == "nan":
            vectors[0][0] = float("nan")
        if fault == "zero":
            vectors[0] = [0.0] * width
        if fault == "unnormalized":
            vectors = [[2 * x for x in v] for v in vectors]
        if fault == "short":
            vectors = vectors[:-1]
        count = sum(tokens(text) for text in inputs)
        answer: dict[str, Any]
        if path == "/api/embed":
            answer = {"model": model, "embeddings": vectors}
            if fault != "no_usage":
                answer["prompt_eval_count"] = count
        else:
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
            if fault == "reversed":
                data.reverse()
            if fault == "dup_index":
                data[1]["index"] = 0
            answer = {"object": "list", "data": data, "model": model}
            if fault != "no_usage":
                answer["usage"] = {"prompt_tokens": count, "total_tokens": count}
        # json.dumps writes NaN as the bare literal NaN, as a careless server would.
        return 200, json.dumps(answer).encode()


@asynccontextmanager
async def aiohttp_server(service: EmbeddingService) -> AsyncIterator[str]:
    """Serve `service` on 127.0.0.1 (port 0); yields the base URL. asyncio only."""
    from aiohttp import web

    async def handler(request: web.Request) -> web.Response:
        status, body = await service.handle(request.path, request.headers.get("Authorization"), await request.read())
        return web.Response(status=status, body=body, content_type="application/json")

    async with loopback_server({"/api/embed": handler, "/v1/embeddings": handler}) as url:
        yield url


def mock_transport(service: EmbeddingService) -> httpx.AsyncBaseTransport:
    """The same service as an httpx transport (runs on any anyio backend)."""

    async def handler(request: httpx.Request) -> httpx.Response:
        status, body = await service.handle(
            request.url.path, request.headers.get("Authorization"), await request.aread()
        )
        return httpx.Response(status, content=body, headers={"Content-Type": "application/json"})

    return httpx.MockTransport(handler)


@asynccontextmanager
async def serve(service: EmbeddingService, backend: str) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """(base URL, client) for the service: a real server on asyncio, the mock transport on trio."""
    if backend == "asyncio":
        async with aiohttp_server(service) as url, httpx.AsyncClient() as client:
            yield url, client
    else:
        async with httpx.AsyncClient(transport=mock_transport(service)) as client:
            yield "http://loopback", client
