"""A fake embedding service speaking the real Ollama (`POST /api/embed`) and OpenAI
(`POST /v1/embeddings`) wire formats, with faults.

`EmbeddingService.handle` is the whole behaviour; it is served three ways:
- `aiohttp_server()`: a real aiohttp server on 127.0.0.1, port 0, in the test's event loop (asyncio);
- `mock_transport()`: an httpx transport in the shape of `httpx.MockTransport`, so the same
  provider code runs on trio (with its mock clock) too;
- `EmbeddingServer`: the service on a real port in threads of its own, beside daemon processes
  under test (`env()` points a daemon at it).
Vectors are deterministic per input text (`vector_for`), so a test knows which vector each text
gets and which went to whom; `dimension` can differ from the local model's, to exercise a change
of vector space.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import anyio.to_thread
import httpx
import numpy as np

from tests.support.loopback import loopback_server

PATHS = ("/api/embed", "/v1/embeddings")
HOLD_S = 60.0
"""How long a held request waits for `release` at most (a test that never releases it fails)."""
STARTUP_PROBE = "start-up probe"
"""Text of the daemon's start-up probe, which `delay_s` leaves alone."""

OK = "ok"
FAULTS = {
    OK,
    "slow",  # wait `slow_s` seconds, then answer normally
    "http500",
    "http503",
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


def vector_for(text: str, dimension: int) -> list[float]:
    """The unit vector the service answers for `text`: seeded by the text's hash."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dimension)
    return [float(x) for x in v / np.linalg.norm(v)]


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
        self.slow_s = 1.0
        """How long the `slow` fault waits."""
        self.down = False
        """While set, every call is answered 503: a provider that is down."""
        self.delay_s = 0.0
        """Every call but the daemon's start-up probe waits this long first: a slow provider."""
        self.refuse: str | None = None
        """A call with an input containing this is answered 400, as a server refuses an input
        longer than the model's context."""
        self.refused = 0
        """Calls answered 400 for `refuse`."""
        self.corrupt: str | None = None
        """An input containing this gets a vector one number short: a provider answering with a
        broken vector, which the daemon must refuse rather than search or store."""
        self.hold: str | None = None
        """A call with exactly this input waits until `release` is set; `held` is set when it
        comes. The test decides when the caller gets that vector, whatever the machine's speed."""
        self.held = threading.Event()
        self.release = threading.Event()
        self.in_flight = 0
        self.max_in_flight = 0

    def vector(self, text: str, dimension: int | None = None) -> list[float]:
        return vector_for(text, dimension or self.dimension)

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
        if self.down:
            fault = "http503"
        if self.refuse is not None and any(self.refuse in text for text in inputs):
            self.refused += 1
            fault = "http400"
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay_s and not any(STARTUP_PROBE in text for text in inputs):
                await anyio.sleep(self.delay_s)
            if self.hold is not None and self.hold in inputs:
                self.held.set()
                await anyio.to_thread.run_sync(self.release.wait, HOLD_S)
            if fault == "slow":
                await anyio.sleep(self.slow_s)
            return self._answer(path, request.get("model", ""), inputs, fault)
        finally:
            self.in_flight -= 1

    def _answer(self, path: str, model: str, inputs: list[str], fault: str) -> tuple[int, bytes]:
        if fault.startswith("http"):
            return int(fault[4:]), b'{"error": {"message": "injected fault", "type": "invalid_request_error"}}'
        if fault == "garbage":
            return 200, b"<html>surprise</html>"
        width = self.dimension + 1 if fault == "wrong_dim" else self.dimension
        vectors = [self.vector(text, width) for text in inputs]
        if self.corrupt is not None:
            vectors = [v[:-1] if self.corrupt in t else v for t, v in zip(inputs, vectors, strict=True)]
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

    async with loopback_server(dict.fromkeys(PATHS, handler)) as url:
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


class EmbeddingServer(EmbeddingService):
    """The service on 127.0.0.1 (port 0), each request answered in a thread of its own (stdlib
    HTTP server), for daemons under test, which are other processes. `close()` stops it."""

    def __init__(self, dimension: int = 64) -> None:
        super().__init__(dimension)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path in PATHS:
                    status, data = anyio.run(owner.handle, self.path, self.headers.get("Authorization"), body)
                else:
                    status, data = 404, b""
                # A daemon killed mid-call (the SIGKILL tests) has closed its end: nobody to answer.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        """The OpenAI-style base URL (with `/v1`)."""
        return self.base + "/v1"

    def env(self, model: str = "fake-embedder", provider: str = "openai") -> dict[str, str]:
        """A daemon's environment pointing its embedding provider at this server."""
        return {
            "RECALLD_EMBEDDING_PROVIDER": provider,
            "RECALLD_EMBEDDING_URL": self.url if provider == "openai" else self.base,
            "RECALLD_EMBEDDING_MODEL": model,
        }

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
