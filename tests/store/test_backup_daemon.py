"""`recalld backup` from a running daemon and `recalld restore` into an empty database: every
record, revision and tombstone comes back, recall answers as before once the vector space is
rebuilt from the stored vectors, and a restore never goes over someone's data."""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from recalld.store.embedded import EmbeddedPostgres
from tests.support import Daemon, create_database, namespace, scratch_dir, sql
from tests.support.cli import recalld
from tests.support.locks import table_locked
from tests.support.other_users import as_user
from tests.support.waits import eventually, wait_for_generation

TOPICS = ["rotate keys", "restore the ledger", "refund an order", "page on-call"]


def populate(daemon: Daemon, ns: str) -> tuple[list[str], list[str], list[str]]:
    """24 records; 4 forgotten, 4 revised. Returns (all ids, forgotten, revised)."""
    ids = []
    for i in range(24):
        title = f"Runbook {i}: how to {TOPICS[i % 4]}"
        status, created = daemon.call(
            "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": f"Steps for case {i}. " * 4}
        )
        assert status == 201, created
        ids.append(created["id"])
    forgotten, revised = ids[:4], ids[4:8]
    for rid in forgotten:
        assert daemon.call("DELETE", f"/v1/records/{rid}")[0] == 200
    for rid in revised:
        status, body = daemon.call("GET", f"/v1/records/{rid}")
        update = {"namespace": ns, "kind": "doc", "title": body["title"], "body": "revised: refund an order today"}
        assert daemon.call("PUT", f"/v1/records/{rid}", update)[0] == 200
    return ids, forgotten, revised


def answers(daemon: Daemon, ns: str) -> list[list[str]]:
    out = []
    for query in ("refund an order", "restore the ledger", "who carries the pager"):
        status, body = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": query, "k": 5})
        assert status == 200 and body["degraded_routes"] == [], body
        out.append([hit["id"] for hit in body["results"]])
    return out


def test_a_backup_restored_into_an_empty_database_answers_as_before(
    make_daemon: Any, postgres: EmbeddedPostgres
) -> None:
    source = make_daemon()
    ns = namespace()
    ids, forgotten, revised = populate(source, ns)
    wait_for_generation(source)
    before = {rid: source.call("GET", f"/v1/records/{rid}") for rid in ids}
    recalled = answers(source, ns)
    dest = scratch_dir("recalld-backup-") / "backup"

    done = recalld(None, "--socket", str(source.socket), "backup", str(dest))
    assert done.returncode == 0, done.stderr
    manifest = json.loads((dest / "manifest.json").read_text())
    dump = (dest / manifest["dump"]["file"]).read_bytes()
    assert manifest["dump"] == {"file": "database.dump", "bytes": len(dump), "sha256": hashlib.sha256(dump).hexdigest()}
    assert manifest["counts"]["records"] == len(ids) and manifest["counts"]["generations"] >= 1
    spaces = sql(source.env["RECALLD_STORE_DSN"], "SELECT space_id FROM vector_spaces ORDER BY space_id")
    assert [space["space_id"] for space in manifest["vector_spaces"]] == [r["space_id"] for r in spaces]
    assert any(space["vectors"] > 0 for space in manifest["vector_spaces"]), "the recall model's vectors"
    assert dest.stat().st_mode & 0o077 == 0, "the backup holds records: its owner's alone"
    source.stop()

    occupied = source.env["RECALLD_STORE_DSN"]
    refused = recalld(None, "restore", str(dest), "--dsn", occupied)
    assert refused.returncode == 1 and "not empty" in refused.stderr, refused.stderr
    target = create_database(postgres)
    done = recalld(None, "restore", str(dest), "--dsn", target)
    assert done.returncode == 0, done.stderr
    assert sql(target, "SELECT current, version FROM generation_pointer")[0]["current"] is None
    assert sql(target, "SELECT count(*) AS n FROM generations")[0]["n"] == 0, "generations are derived data"
    statistics = sql(target, "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'records'")
    assert statistics[0]["last_analyze"] is not None, "a dump holds no planner statistics: the restore takes them"

    restored = make_daemon(dsn=target)
    for rid in ids:
        assert restored.call("GET", f"/v1/records/{rid}") == before[rid], rid
    for rid in forgotten:
        assert before[rid][0] == 404, "forgotten stays forgotten"
    for rid in revised:
        assert before[rid][1]["revision"] == 2
    wait_for_generation(restored)
    assert answers(restored, ns) == recalled


def test_a_restore_refuses_a_damaged_dump_and_a_data_directory_in_use(make_daemon: Any) -> None:
    source = make_daemon()
    source.call("POST", "/v1/records", {"namespace": namespace(), "kind": "doc", "title": "one", "body": "two"})
    dest = scratch_dir("recalld-backup-") / "backup"
    assert recalld(None, "--socket", str(source.socket), "backup", str(dest)).returncode == 0
    again = recalld(None, "--socket", str(source.socket), "backup", str(dest))
    assert again.returncode == 1 and "not empty" in again.stderr, "a backup never overwrites another"

    occupied: Path = scratch_dir("recalld-data-")
    (occupied / "something").write_text("theirs")
    refused = recalld(None, "restore", str(dest), "--data-dir", str(occupied))
    assert refused.returncode == 1 and "not empty" in refused.stderr, refused.stderr
    assert [p.name for p in occupied.iterdir()] == ["something"], "nothing of theirs touched"

    dump = dest / "database.dump"
    damage = bytearray(dump.read_bytes())
    damage[len(damage) // 2] ^= 0xFF  # one bit rot on the backup disk
    dump.write_bytes(bytes(damage))
    damaged = recalld(None, "restore", str(dest), "--data-dir", str(scratch_dir("recalld-data-") / "new"))
    assert damaged.returncode == 1 and "SHA-256" in damaged.stderr, damaged.stderr


def test_only_an_administrator_may_take_a_backup(make_daemon: Any) -> None:
    """The dump holds every namespace: a reader of one gets 403, and no dump is started."""
    ns = namespace()
    daemon = make_daemon(
        env={"RECALLD_SERVER_SOCKET_MODE": str(0o666), "RECALLD_ACCESS_READERS": f'{{ "65534" = ["{ns}"] }}'}
    )
    refused = as_user(daemon, 65534, "GET", "/admin/backup")
    assert refused["status"] == 403 and refused["body"]["error"]["code"] == "forbidden", refused


def test_a_restore_whose_rows_differ_from_the_manifest_is_refused_and_removes_what_it_made(
    make_daemon: Any, postgres: EmbeddedPostgres
) -> None:
    """The rows restored are compared with the manifest's counts: a dump that holds fewer rows
    than its manifest says is refused. A failed restore removes the data directory (and the
    folders above it) that it made, and only those: a directory the user gave stays. Into a
    database, it drops the tables it made: the database is as empty as before."""
    source = make_daemon()
    status, _ = source.call("POST", "/v1/records", {"namespace": namespace(), "kind": "doc", "title": "a", "body": "b"})
    assert status == 201
    dest = scratch_dir("recalld-backup-") / "backup"
    assert recalld(None, "--socket", str(source.socket), "backup", str(dest)).returncode == 0
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["counts"]["records"] += 1  # the dump holds one row fewer than the manifest says
    (dest / "manifest.json").write_text(json.dumps(manifest))

    scratch = scratch_dir("recalld-data-")
    made = scratch / "made" / "data"
    refused = recalld(None, "restore", str(dest), "--data-dir", str(made))
    assert refused.returncode == 1, refused.stderr
    assert "does not match the backup's manifest (records: 1 rows, 2 in the manifest)" in refused.stderr
    assert list(scratch.iterdir()) == [], "the folders it made are gone"

    given = scratch / "given"
    given.mkdir()
    refused = recalld(None, "restore", str(dest), "--data-dir", str(given))
    assert refused.returncode == 1 and "does not match" in refused.stderr, refused.stderr
    assert given.is_dir() and list(given.iterdir()) == [], "the user's directory stays, as empty as it was"

    target = create_database(postgres)
    refused = recalld(None, "restore", str(dest), "--dsn", target)
    assert refused.returncode == 1 and "does not match" in refused.stderr, refused.stderr
    assert sql(target, "SELECT count(*) AS n FROM pg_tables WHERE schemaname = 'public'")[0]["n"] == 0
    manifest["counts"]["records"] -= 1
    (dest / "manifest.json").write_text(json.dumps(manifest))
    done = recalld(None, "restore", str(dest), "--dsn", target)  # which restores only into an empty database
    assert done.returncode == 0, done.stderr


def test_a_backup_whose_server_goes_away_before_the_dump_is_written_is_a_503(make_daemon: Any) -> None:
    """A server lost while pg_dump reads the catalogue (a failover, a restart) is an outage to
    retry, 503 `store_unavailable`, not a failed backup. pg_dump is held at its lock on a table of
    another schema (which it dumps, and the manifest's counts do not read) until the server is
    stopped."""
    server = EmbeddedPostgres(scratch_dir("recalld-backup-lost-"), shared_buffers_mb=128)
    server.start()
    try:
        dsn = create_database(server)
        daemon = make_daemon(dsn=dsn)
        status, _ = daemon.call("POST", "/v1/records", {"namespace": "lost", "kind": "doc", "title": "T", "body": "B"})
        assert status == 201
        sql(dsn, "CREATE SCHEMA held")
        sql(dsn, "CREATE TABLE held.t (x int)")
        waiting = (
            "SELECT count(*) AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE NOT l.granted AND a.application_name = 'pg_dump'"
        )
        with table_locked(dsn, "held.t"), ThreadPoolExecutor(1) as pool:
            answer = pool.submit(daemon.call, "GET", "/admin/backup")
            eventually(lambda: sql(dsn, waiting)[0]["n"], 60, "pg_dump waiting for its lock")
            server.stop()
            status, body = answer.result(timeout=60)
        assert status == 503 and body["error"]["code"] == "store_unavailable", (status, body)
    finally:
        server.stop()
