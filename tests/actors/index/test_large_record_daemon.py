"""The largest record a client may write is indexed while the daemon keeps answering: `/livez`
answers within a second meanwhile (docs/DESIGN.md, "Nothing stalls the event loop")."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from recalld.actors.index.chunking import chunk_text
from recalld.config import RecordsConfig, ServerConfig
from tests.support import Daemon
from tests.support.waits import wait_for_generation

# What a liveness probe must answer within (docs/DESIGN.md); systemd's watchdog allows 30 s.
LIVEZ_BOUND_S = 1.0
INDEXED_WITHIN_S = 900.0


def body_of(length: int) -> str:
    """Sentences and paragraphs of `length` characters made of words longer than the tokenizer's
    100 characters: the model reads each as one unknown token, so its share (in a worker thread,
    not what is tested here) takes seconds rather than minutes, while the chunker, the store and
    the index see chunks of ordinary shape, a thousand characters each. Every sentence carries its
    number, so no two chunks are the same text (a record's repeated chunks are indexed once)."""
    words = [f"{stem * 20}{n}" for n, stem in enumerate(["quokka", "lantern", "harbour", "meadow", "copper", "willow"])]
    sentences, size, number = [], 0, 0
    while size < length:
        i = number % 6
        sentence = f"{' '.join(words[i:] + words[:i])} {number}." + ("\n\n" if i == 5 else " ")
        sentences.append(sentence)
        size += len(sentence)
        number += 1
    return "".join(sentences)[:length]


def found_by_the_vector_route(daemon: Daemon, namespace: str, record_id: str) -> None:
    status, answer = daemon.call(
        "POST", "/v1/recall", {"namespace": namespace, "query": "a record", "routes": ["vector"]}
    )
    assert status == 200, answer
    assert [r["id"] for r in answer["results"]] == [record_id], answer
    assert answer["degraded_routes"] == []


class LivezProbe:
    """Asks `/livez` every quarter second from its own thread and connection, as a watchdog or
    an orchestrator's probe would, and records how long each answer took."""

    def __init__(self, daemon: Daemon) -> None:
        self._client = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(daemon.socket)), base_url="http://recalld", timeout=300
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def __enter__(self) -> LivezProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._client.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                status = self._client.get("/livez").status_code
                problem = None if status == 200 else f"status {status}"
            except httpx.HTTPError as exc:
                problem = repr(exc)
            self.latencies.append(time.monotonic() - started)
            if problem is not None:
                self.failures.append(problem)
            self._stop.wait(0.25)  # a probe's pace


@pytest.mark.slow
def test_livez_answers_while_the_largest_record_is_indexed(make_daemon: Any) -> None:
    body = body_of(RecordsConfig().max_body_chars)
    request = {"namespace": "large", "kind": "doc", "title": "The largest record", "body": body}
    assert len(json.dumps(request)) < ServerConfig().max_body_bytes  # the request itself is allowed
    chunks = len(set(chunk_text(body)))
    assert chunks > 4000
    daemon: Daemon = make_daemon()

    with LivezProbe(daemon) as probe:
        status, created = daemon.call("POST", "/v1/records", request)
        assert status == 201, created

        def live() -> None:
            assert max(probe.latencies, default=0) < LIVEZ_BOUND_S, f"/livez took {max(probe.latencies):.1f} s"

        wait_for_generation(daemon, lambda current: current["count"] == chunks, timeout=INDEXED_WITHIN_S, check=live)

    assert probe.failures == []
    assert len(probe.latencies) > 10
    assert max(probe.latencies) < LIVEZ_BOUND_S, f"/livez took {max(probe.latencies):.1f} s while indexing"
    found_by_the_vector_route(daemon, "large", created["id"])


def test_a_record_longer_to_embed_than_one_call_may_take_is_indexed(make_daemon: Any) -> None:
    # About 1,200 chunks: seconds of model time, against 2 s for any one embedder call. One call
    # for the whole record ran out of time on every pass, and the record was never indexed.
    body = body_of(1_000_000)
    chunks = len(set(chunk_text(body)))
    daemon: Daemon = make_daemon(env={"RECALLD_EMBEDDING_TIMEOUT_S": "2"})
    status, created = daemon.call(
        "POST", "/v1/records", {"namespace": "long", "kind": "doc", "title": "A long record", "body": body}
    )
    assert status == 201, created
    wait_for_generation(daemon, lambda current: current["count"] == chunks, timeout=240)
    found_by_the_vector_route(daemon, "long", created["id"])
