"""A real embedding server on loopback, in a thread, for daemon-level tests: it speaks the
OpenAI wire format (`POST /v1/embeddings`) and Ollama's (`POST /api/embed`).

Daemons under test are separate processes, so this server runs beside the test on a real
port. Vectors are deterministic per input (a hash-seeded unit vector), so a test knows which
vector each text gets; `down` makes it answer 503, `delay_s` slow, `refuse` and `corrupt` turn
down or break the vectors of chosen inputs, `hold` keeps one input waiting until the test lets it
go, and `dimension` can differ from the local model's, to exercise a change of vector space.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


def unit_vector(text: str, dimension: int) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dimension)
    return [float(x) for x in v / np.linalg.norm(v)]


class FakeOpenAI:
    def __init__(self, dimension: int = 64) -> None:
        self.dimension = dimension
        self.down = False
        self.delay_s = 0.0
        """Answer this much later (the start-up probe excepted), to make a slow provider."""
        self.refuse: str | None = None
        """A request with an input containing this is answered 400, as OpenAI answers an input
        longer than the model's context."""
        self.refused = 0
        """Requests answered 400 for `refuse`."""
        self.corrupt: str | None = None
        """An input containing this gets a vector one number short: a provider answering with a
        broken vector, which the daemon must refuse rather than search or store."""
        self.hold: str | None = None
        """A request with exactly this input waits until `release` is set; `held` is set when it
        comes. The test decides when the daemon gets that vector, whatever the machine's speed."""
        self.held = threading.Event()
        self.release = threading.Event()
        self.calls = 0
        self.inputs = 0
        self.tokens = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def reply_json(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.calls += 1
                if owner.delay_s and "start-up probe" not in str(body.get("input")):
                    time.sleep(owner.delay_s)
                if owner.down or self.path not in ("/v1/embeddings", "/api/embed"):
                    self.send_response(503 if owner.down else 404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                if owner.hold is not None and owner.hold in inputs:
                    owner.held.set()
                    owner.release.wait(60)
                if owner.refuse is not None and any(owner.refuse in text for text in inputs):
                    owner.refused += 1
                    self.reply_json(400, b'{"error": {"message": "input too long", "type": "invalid_request_error"}}')
                    return
                owner.inputs += len(inputs)
                owner.tokens += sum(len(t.split()) for t in inputs)
                vectors = [unit_vector(t, owner.dimension) for t in inputs]
                if owner.corrupt is not None:
                    vectors = [v[:-1] if owner.corrupt in t else v for t, v in zip(inputs, vectors, strict=True)]
                if self.path == "/api/embed":
                    answer: dict[str, Any] = {
                        "model": body.get("model", "fake"),
                        "embeddings": vectors,
                        "prompt_eval_count": sum(len(t.split()) for t in inputs),
                    }
                else:
                    answer = {
                        "object": "list",
                        "model": body.get("model", "fake"),
                        "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                        "usage": {"prompt_tokens": sum(len(t.split()) for t in inputs), "total_tokens": 0},
                    }
                self.reply_json(200, json.dumps(answer).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def env(self, model: str = "fake-embedder", provider: str = "openai") -> dict[str, str]:
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        return {
            "RECALLD_EMBEDDING_PROVIDER": provider,
            "RECALLD_EMBEDDING_URL": base + "/v1" if provider == "openai" else base,
            "RECALLD_EMBEDDING_MODEL": model,
        }

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
