"""Full text and the query's embedding: with `[recall] fts_waits_for_embedding` full text starts
only once the vector route has its query vector (the local model uses every core while it runs,
so a full-text statement beside it only slows it down), and never waits longer than
`fts_embedding_wait_ms`, so a slow embedding cannot cost full text its answer.

The provider is a real OpenAI-wire server on loopback that holds the query's embedding until
the test lets it go; the bound is set far above or well below what each test waits for, so what
full text saw tells when it ran, whatever the machine's speed."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from recalld.actors.embedding.template import render_query
from recalld.config import Config
from tests.support import Daemon, namespace
from tests.support.embedding_service import EmbeddingServer
from tests.support.waits import wait_for_generation


def held_recall(daemon: Daemon, fake: EmbeddingServer, body: dict[str, Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Send `body` to /v1/recall from a thread of its own (its own connection), holding its query's
    embedding at the provider; returns once the provider has the query in hand."""
    fake.hold = render_query(body["query"], version=Config().embedding.template_version).text
    answer: dict[str, Any] = {}

    def ask() -> None:
        transport = httpx.HTTPTransport(uds=str(daemon.socket))
        with httpx.Client(transport=transport, base_url="http://recalld", timeout=60) as client:
            response = client.post("/v1/recall", json=body)
            answer.update(status=response.status_code, body=response.json())

    asking = threading.Thread(target=ask)
    asking.start()
    assert fake.held.wait(30), "the query's embedding never reached the provider"
    return asking, answer


def create(daemon: Daemon, ns: str, title: str, body: str) -> str:
    status, created = daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": body})
    assert status == 201, created
    return str(created["id"])


def test_full_text_starts_once_the_query_vector_is_ready(make_daemon: Any, fake: EmbeddingServer) -> None:
    # the duplicate check of the create below asks the held provider too: cut it short
    env = {
        "RECALLD_RECALL_FTS_WAITS_FOR_EMBEDDING": "always",
        "RECALLD_RECALL_FTS_EMBEDDING_WAIT_MS": "60000",  # the test releases the embedding well before
        "RECALLD_DUPLICATES_TIME_CAP_S": "0.2",
    }
    daemon: Daemon = make_daemon(env={**fake.env(), **env})
    ns = namespace()
    create(daemon, ns, "Kiln schedule", "Fire the quokka kiln at dawn.")
    wait_for_generation(daemon)  # the vector route searches (an empty index refuses before embedding)
    asking, answer = held_recall(daemon, fake, {"namespace": ns, "query": "quokka kiln", "k": 10})
    try:
        # written while the query's embedding is held: only a full text that waited for it sees this
        late = create(daemon, ns, "Quokka kiln repairs", "The quokka kiln needs new bricks.")
    finally:
        fake.release.set()
        asking.join(60)
    assert answer["status"] == 200, answer
    assert late in {r["id"] for r in answer["body"]["results"] if "fts" in r["routes"]}, answer


def test_full_text_waits_for_a_slow_embedding_only_briefly(make_daemon: Any, fake: EmbeddingServer) -> None:
    # a bound well inside the request's deadline: without it full text would wait past the deadline
    env = {"RECALLD_RECALL_FTS_WAITS_FOR_EMBEDDING": "always", "RECALLD_RECALL_FTS_EMBEDDING_WAIT_MS": "200"}
    daemon: Daemon = make_daemon(env={**fake.env(), **env})
    ns = namespace()
    kept = create(daemon, ns, "Kiln schedule", "Fire the kiln at dawn.")
    wait_for_generation(daemon)
    # the embedding never comes within the request's deadline; full text answers all the same
    asking, answer = held_recall(daemon, fake, {"namespace": ns, "query": "kiln schedule", "deadline_ms": 3000})
    asking.join(60)
    fake.release.set()
    assert answer["status"] == 200, answer
    assert [(r["id"], r["routes"]) for r in answer["body"]["results"]] == [(kept, {"fts": 1})], answer
    assert [(d["route"], d["reason"]) for d in answer["body"]["degraded_routes"]] == [("vector", "deadline_exceeded")]
