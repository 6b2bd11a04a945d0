"""Forgotten and replaced text in a running daemon: a forget removes the record's vectors and
chunk text from PostgreSQL when it commits, an update the replaced revision's vectors; a rollback
to a generation built before the forget (whose own file still holds the vectors) never returns
the forgotten record; and the sweeper deletes what is left of retired chunks (their surrogate
rows, which older generations need as tombstones) once no generation on disk references them."""

from __future__ import annotations

from typing import Any

from tests.support import Daemon, scratch_dir, sql
from tests.support.waits import eventually, wait_for_generation

NS = "purge"
LAUNCH = "The launch codes for the rocket are zebra nine tango; keep them in the safe."
DOOR = "The door code of the server room is four seven one one."


def generations(daemon: Daemon) -> dict[str, Any]:
    status, body = daemon.call("GET", "/v1/generations")
    assert status == 200, body
    return body


def indexed(daemon: Daemon, *, previous: str | None = None) -> str:
    """Every record searchable; with `previous`, on a generation other than it. The generation's id."""
    return str(wait_for_generation(daemon, lambda current: current["id"] != previous)["current"]["id"])


def put(daemon: Daemon, title: str, body: str) -> str:
    status, created = daemon.call("POST", "/v1/records", {"namespace": NS, "kind": "doc", "title": title, "body": body})
    assert status == 201, created
    return str(created["id"])


def recall(daemon: Daemon, query: str) -> dict[str, Any]:
    status, answer = daemon.call("POST", "/v1/recall", {"namespace": NS, "query": query, "k": 10})
    assert status == 200, answer
    return answer


def vectors_of(dsn: str, record_id: str, revision: int | None = None) -> int:
    return int(
        sql(
            dsn,
            """SELECT count(*) AS n FROM chunk_vectors v JOIN chunks c ON c.surrogate = v.surrogate
               WHERE c.record_id = $1::uuid AND ($2::int IS NULL OR c.revision = $2)""",
            record_id,
            revision,
        )[0]["n"]
    )


def chunk_rows(dsn: str, record_id: str, revision: int) -> int:
    statement = "SELECT count(*) AS n FROM chunks WHERE record_id = $1::uuid AND revision = $2"
    return int(sql(dsn, statement, record_id, revision)[0]["n"])


def activate(daemon: Daemon, generation: str) -> None:
    status, answer = daemon.call("POST", f"/admin/generations/{generation}/activate", {})
    assert (status, answer.get("id")) == (200, generation), answer
    eventually(
        lambda: recall(daemon, "launch codes")["generation"],
        30,
        f"recall served from the activated generation {generation}",
        accept=lambda served: served == generation,
    )


def test_forget_purges_vectors_and_a_rollback_never_returns_the_record(make_daemon: Any, fresh_dsn: str) -> None:
    root = scratch_dir("recalld-test-purge-")
    env = {
        "RECALLD_INDEX_DIRECTORY": str(root),
        "RECALLD_INDEX_COMPACT_SHARE": "10",  # generations change only when the test asks
        "RECALLD_GC_INTERVAL_S": "0.3",
        "RECALLD_GC_ROLLBACK_WINDOW_S": "3600",
    }
    daemon: Daemon = make_daemon(dsn=fresh_dsn, env=env)
    launch = put(daemon, "Launch codes", LAUNCH)
    door = put(daemon, "Door code", DOOR)
    put(daemon, "Lunch menu", "The canteen serves soup on Mondays and fish on Fridays.")
    first = indexed(daemon)
    assert launch in [r["id"] for r in recall(daemon, "rocket launch codes")["results"]]

    assert daemon.call("DELETE", f"/v1/records/{launch}")[0] == 200
    status, _ = daemon.call(
        "PUT", f"/v1/records/{door}", {"namespace": NS, "kind": "doc", "title": "Door code", "body": "Badges only."}
    )
    assert status == 200

    # at once, in PostgreSQL: nothing of the forgotten record but its id and surrogate rows
    assert vectors_of(fresh_dsn, launch) == 0, "the forgotten record's vectors outlived the forget"
    assert vectors_of(fresh_dsn, door, 1) == 0, "the replaced revision's vectors outlived the update"
    leftovers = sql(
        fresh_dsn,
        """SELECT (SELECT count(*) FROM chunks WHERE text <> '' AND retired_at IS NOT NULL) AS texts,
                  (SELECT count(*) FROM chunks WHERE search @@ to_tsquery('english', 'zebra | seven')) AS chunk_words,
                  (SELECT count(*) FROM records WHERE search @@ to_tsquery('english', 'zebra')) AS record_words,
                  (SELECT title || body FROM records WHERE id = $1::uuid) AS text""",
        launch,
    )[0]
    assert dict(leftovers) == {"texts": 0, "chunk_words": 0, "record_words": 0, "text": ""}
    assert chunk_rows(fresh_dsn, launch, 1) >= 1, "the surrogate rows stay: `first` still holds them"

    assert indexed(daemon) == first  # the new revision is searchable, as a delta on `first`
    assert daemon.call("POST", "/admin/generations/rebuild", {})[0] == 202
    second = indexed(daemon, previous=first)

    # roll back to the generation built before the forget: its own file still holds the record's
    # vectors, and the tombstones (retired surrogate rows) keep excluding it
    activate(daemon, first)
    for query in ("rocket launch codes", LAUNCH, "zebra nine tango"):
        answer = recall(daemon, query)
        assert launch not in [r["id"] for r in answer["results"]], (query, answer)
        assert answer["generation"] == first
    assert door in [r["id"] for r in recall(daemon, "badges only")["results"]]

    # a record changed after both builds: its first revision is in no generation's file
    memo = put(daemon, "Memo", "Parking spaces are assigned by the facilities desk.")
    indexed(daemon)
    status, _ = daemon.call(
        "PUT", f"/v1/records/{memo}", {"namespace": NS, "kind": "doc", "title": "Memo", "body": "No more parking."}
    )
    assert status == 200
    indexed(daemon)
    sql(fresh_dsn, "UPDATE chunks SET retired_at = now() - interval '2 hours' WHERE retired_at IS NOT NULL")
    eventually(
        lambda: chunk_rows(fresh_dsn, memo, 1),
        30,
        "the sweeper deleting a retired chunk no generation references",
        accept=lambda rows: rows == 0,
    )
    # the same pass kept the rows `first` (current, on disk) still references
    assert chunk_rows(fresh_dsn, launch, 1) >= 1 and chunk_rows(fresh_dsn, door, 1) >= 1
    assert launch not in [r["id"] for r in recall(daemon, "rocket launch codes")["results"]]

    # forward again; once `first` is out of the rollback window and gone, so are its tombstones
    activate(daemon, second)
    sql(fresh_dsn, "UPDATE generations SET deactivated_at = now() - interval '2 hours' WHERE id = $1", first)
    eventually(
        lambda: ((root / first).exists(), chunk_rows(fresh_dsn, launch, 1), chunk_rows(fresh_dsn, door, 1)),
        30,
        "the old generation's directory and tombstoned chunks swept",
        accept=lambda seen: seen == (False, 0, 0),
    )
    assert launch not in [r["id"] for r in recall(daemon, "rocket launch codes")["results"]]
    assert chunk_rows(fresh_dsn, door, 2) >= 1, "live chunks stay"
    assert daemon.call("GET", f"/v1/records/{launch}")[0] == 404
