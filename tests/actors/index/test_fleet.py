"""A fleet: daemons over one PostgreSQL, each with its own data directory and nothing else shared
(docs/OPERATIONS.md, "Running a fleet").

A record written through one member is found by meaning through the others; they build their
own copies of the published generation from the vectors stored in PostgreSQL, never embedding
again; when the builder is SIGKILLed another member takes the builder lock and indexes the new
writes.
"""

from __future__ import annotations

import os
import shutil
import signal
from typing import Any

import pytest

from tests.support import Daemon, namespace
from tests.support.waits import eventually, wait_for_generation

pytestmark = pytest.mark.slow

WAIT_S = 180  # a member starting (its model loading) and catching up, on a loaded 2-core machine
TOPICS = ["glacier", "volcano", "harbour", "orchard", "lighthouse", "desert", "canyon", "meadow"]


def write(daemon: Daemon, ns: str, title: str, body: str) -> str:
    status, created = daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": body})
    assert status == 201, created
    return str(created["id"])


def index_tokens(members: list[Daemon]) -> int:
    """Tokens embedded to index, fleet-wide: each member writes what its embedder gathered when
    asked, and the usage table is shared."""
    for member in members:  # each flushes what its embedder gathered
        status, usage = member.call("GET", "/v1/usage")
        assert status == 200, usage
    rows = usage["usage"] + usage["system"]  # the last answer, after every member flushed
    return sum(int(row["input_tokens"]) for row in rows if row["purpose"] == "index")


def finds(daemon: Daemon, ns: str, query: str, record_id: str) -> bool:
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "routes": ["vector"], "k": 5})
    return status == 200 and any(r["id"] == record_id for r in answer["results"])


def own_generations(daemon: Daemon) -> set[str]:
    root = daemon.data_dir / "generations"
    return {p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")} if root.is_dir() else set()


def builder_of(members: list[Daemon]) -> list[Daemon]:
    return [m for m in members if m.call("GET", "/v1/generations")[1]["index"]["builder"]]


def test_members_with_their_own_directories_serve_each_others_writes_and_survive_the_builder(
    make_daemon: Any, fresh_dsn: str
) -> None:
    ns = namespace()
    first: Daemon = make_daemon(dsn=fresh_dsn)
    for i in range(24):
        topic = TOPICS[i % len(TOPICS)]
        write(first, ns, f"Field note {i} on the {topic}", f"Observation {i}: the {topic} changed with the season.")
    needle = write(first, ns, "Penguin census on the ice shelf", "We counted emperor penguins breeding on the ice.")
    built = wait_for_generation(first, lambda current: current["count"] >= 25, timeout=WAIT_S)
    generation = built["current"]["id"]
    assert built["index"]["builder"]
    # the builder publishes its generation, then swaps its own handle onto it
    eventually(
        lambda: first.call("GET", "/v1/generations")[1]["serving"]["generation"],
        WAIT_S,
        "the builder serving the generation it published",
        accept=lambda serving: serving == generation,
    )
    tokens = index_tokens([first])
    assert tokens > 0

    second: Daemon = make_daemon(dsn=fresh_dsn)
    third: Daemon = make_daemon(dsn=fresh_dsn)
    members = [first, second, third]
    for member in (second, third):
        eventually(
            lambda member=member: finds(member, ns, "how many penguins breed on the ice", needle),
            WAIT_S,
            "a member of its own directory finding the first member's record by meaning",
        )
        body = eventually(
            lambda member=member: member.call("GET", "/v1/generations")[1],
            WAIT_S,
            "the member serving its own copy of the published generation",
            accept=lambda body: body["serving"]["generation"] == generation,
        )
        assert body["serving"]["files"] == "copy" and not body["index"]["builder"]
        assert body["lag"]["behind"] is False, body["lag"]
        assert generation in own_generations(member), "the copy lies in the member's own data directory"
        ready = member.call("GET", "/readyz")[1]["checks"]["vector"]["detail"]
        assert ready["serving"]["generation"] == generation and "lag" in ready
    assert index_tokens(members) == tokens, "the members built their copies without embedding anything again"
    assert builder_of(members) == [first]

    # The builder dies without a word; the lock goes with its session and a survivor takes it.
    assert first.proc is not None
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    survivors = [second, third]
    newest = write(second, ns, "Volcanic ash grounded every flight", "An eruption spread ash over the airport runway.")
    for member in survivors:
        eventually(
            lambda member=member: finds(member, ns, "which airport cancelled flights because of a volcano", newest),
            WAIT_S,
            "a survivor finding the record written after the builder died",
        )
    assert len(builder_of(survivors)) == 1, "exactly one survivor holds the builder lock"
    assert index_tokens(survivors) > tokens, "the new record was embedded (once, by the new builder)"


def test_each_member_keeps_its_generations_under_its_own_data_directory(make_daemon: Any, fresh_dsn: str) -> None:
    """No member reads or writes another's directory: the second member's copy is a directory of
    its own, built by it, and removing the first member's files changes nothing for it."""
    ns = namespace()
    first: Daemon = make_daemon(dsn=fresh_dsn)
    record = write(first, ns, "Kiln firing schedule", "Fire the clay slowly, then hold the top temperature.")
    generation = wait_for_generation(first, timeout=WAIT_S)["current"]["id"]
    assert first.stop() == 0
    shutil.rmtree(first.data_dir / "generations")  # nothing of the first member's may be needed
    second: Daemon = make_daemon(dsn=fresh_dsn)
    body = eventually(
        lambda: second.call("GET", "/v1/generations")[1],
        WAIT_S,
        "the second member serving its own copy of the first member's generation",
        accept=lambda body: body["serving"]["generation"] == generation,
    )
    assert body["serving"]["files"] == "copy" and body["current"]["id"] == generation, "copied, not built anew"
    assert (second.data_dir / "generations" / generation / "manifest.json").is_file()
    assert finds(second, ns, "pottery kiln", record)
