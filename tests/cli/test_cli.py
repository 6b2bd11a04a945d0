"""The `recalld` command as an operator uses it: health, put/get/forget, recall, ingest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

from tests.support import ROOT, Daemon
from tests.support.cli import recalld
from tests.support.waits import eventually


def test_health_exit_codes(daemon: Daemon, tmp_path: Path) -> None:
    assert recalld(daemon, "health").returncode == 0
    ready = recalld(daemon, "health", "--ready", "--json")
    assert ready.returncode == 0 and json.loads(ready.stdout)["status"] in ("pass", "warn")
    nowhere = recalld(None, "--socket", str(tmp_path / "none.sock"), "health")
    assert nowhere.returncode == 1 and "not reachable" in nowhere.stderr


def test_put_get_recall_forget(daemon: Daemon, ns: str) -> None:
    put = recalld(
        daemon,
        "put",
        "-n",
        ns,
        "--kind",
        "rule",
        "--title",
        "Invoices are due in 30 days",
        "--body",
        "Net-30 payment terms apply to every invoice.",
        "--attr",
        "team=billing",
        "--json",
    )
    assert put.returncode == 0, put.stderr
    rid = json.loads(put.stdout)["id"]
    got = json.loads(recalld(daemon, "get", rid).stdout)
    assert got["attributes"] == {"team": "billing"} and got["kind"] == "rule"
    duplicate = recalld(daemon, "put", "-n", ns, "--kind", "rule", "--title", "invoices are due in 30 days!")
    assert duplicate.returncode == 1 and "exact_duplicate" in duplicate.stderr
    found = recalld(daemon, "recall", "-n", ns, "payment terms", "--route", "fts")
    assert found.returncode == 0 and "Invoices are due in 30 days" in found.stdout
    # no vector candidate is as similar as 1: full text alone answers, and the answer says why
    strict = recalld(daemon, "recall", "-n", ns, "payment terms", "--min-similarity", "1", "--json")
    answer = json.loads(strict.stdout)
    assert answer["fusion"]["thresholds"] == {"vector": 1.0}, answer
    assert [hit["routes"] for hit in answer["results"]] == [{"fts": 1}], answer
    assert recalld(daemon, "forget", rid).returncode == 0
    gone = recalld(daemon, "recall", "-n", ns, "payment terms", "--route", "fts")
    assert "Invoices" not in gone.stdout and "no results" in gone.stderr


def test_ingest_a_folder_then_recall_the_right_files(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "ops").mkdir(parents=True)
    (docs / "ops" / "backup.md").write_text("# Nightly backups\n\nThe ledger is dumped at 02:00 to cold storage.\n")
    (docs / "ops" / "restore.md").write_text(
        "# Restoring\n\nRestore the ledger from the latest dump with pg_restore.\n"
    )
    (docs / "keys.txt").write_text("Signing keys rotate every ninety days.\n")
    (docs / "image.png").write_bytes(b"\x89PNG not text")
    first = recalld(daemon, "ingest", str(docs), "-n", ns)
    assert first.returncode == 0, first.stderr
    assert "3 created, 0 updated, 0 unchanged" in first.stdout
    assert "3/3 files" in first.stderr, "ingest shows progress"

    answer = json.loads(recalld(daemon, "recall", "-n", ns, "cold storage dump", "--route", "fts", "--json").stdout)
    assert answer["results"][0]["source_path"] == str(docs / "ops" / "backup.md")
    assert answer["results"][0]["title"] == "Nightly backups"
    keys = json.loads(recalld(daemon, "recall", "-n", ns, "ninety days", "--route", "fts", "--json").stdout)
    assert keys["results"][0]["source_path"] == str(docs / "keys.txt")

    again = recalld(daemon, "ingest", str(docs), "-n", ns)
    assert "0 created, 0 updated, 3 unchanged" in again.stdout, "re-ingesting unchanged files is a no-op"

    (docs / "keys.txt").write_text("Signing keys rotate every thirty days now.\n")
    changed = recalld(daemon, "ingest", str(docs), "-n", ns)
    assert "0 created, 1 updated, 2 unchanged" in changed.stdout
    hit = json.loads(recalld(daemon, "recall", "-n", ns, "thirty days", "--route", "fts", "--json").stdout)["results"][
        0
    ]
    assert hit["source_path"] == str(docs / "keys.txt") and hit["revision"] == 2


def test_same_heading_in_two_files_keeps_both(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / f"{name}.md").write_text(f"# Overview\n\nSection {name} text about turbines.\n")
    done = recalld(daemon, "ingest", str(tmp_path), "-n", ns)
    assert "2 created" in done.stdout, done.stdout + done.stderr
    answer = json.loads(recalld(daemon, "recall", "-n", ns, "turbines", "--route", "fts", "--json").stdout)
    assert len(answer["results"]) == 2


def test_odd_arguments_get_one_line_and_never_reach_another_route(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    # an id is one path segment: `../../livez` must not become GET /livez
    escaped = recalld(daemon, "get", "../../livez")
    assert escaped.returncode == 1 and "is not a UUID" in escaped.stderr, escaped
    missing = recalld(daemon, "ingest", "--namespace", ns, str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "neither a folder nor a file" in missing.stderr
    body = recalld(daemon, "put", "--namespace", ns, "--title", "t", "--body-file", str(tmp_path))
    assert body.returncode == 2 and "cannot read --body-file" in body.stderr
    # an argument that is not UTF-8 (the shell passes bytes; Python keeps them as surrogates)
    done = subprocess.run(
        [sys.executable.encode(), b"-m", b"recalld", b"recall", b"--namespace", ns.encode(), b"\xff"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RECALLD_SOCKET": str(daemon.socket)},
        cwd=ROOT,
    )
    assert done.returncode == 2 and "valid UTF-8" in done.stderr, done.stderr
    for result in (escaped, missing, body, done):
        assert "Traceback" not in result.stderr


def test_ingest_sets_aside_a_file_whose_name_is_not_utf8(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "good.md").write_text("\ufeff# Good heading\n\nbody")  # a byte-order mark first
    bad = os.path.join(os.fsencode(folder), b"bad\xffname.md")
    with open(bad, "wb") as handle:
        handle.write(b"# Bad\n\nbody")
    done = recalld(daemon, "ingest", "--namespace", ns, str(folder))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "1 created" in done.stdout and "1 failed" in done.stdout, done.stdout
    status, answer = daemon.call("GET", f"/v1/records?namespace={ns}")
    assert status == 200 and [r["title"] for r in answer["records"]] == ["Good heading"]


def test_titles_cannot_drive_the_terminal(daemon: Daemon, ns: str) -> None:
    title = "Quarterly \x1b[2Jreport \u202egnp.exe\x9b31m 数据\u3000报告 👩\u200d💻"
    status, created = daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": "sapphire ledger"}
    )
    assert status == 201, created
    found = recalld(daemon, "recall", "-n", ns, "sapphire", "--route", "fts")
    got = recalld(daemon, "get", created["id"])
    for shown in (found.stdout, got.stdout):
        assert not any(ch in shown for ch in "\x1b\x9b\u202e"), repr(shown)
        assert "\\u001b[2J" in shown and "\\u202egnp.exe\\u009b31m" in shown, repr(shown)
        assert "数据\u3000报告 👩\u200d💻" in shown, "text that cannot drive a terminal is printed as it is"
    assert json.loads(got.stdout)["title"] == title, "the JSON printed still reads back as the stored title"


def test_namespaces_cannot_drive_the_terminal(daemon: Daemon) -> None:
    namespace = "team\x1b]0;pwned\x07"  # namespaces are free text, and usage and stats print them
    status, _ = daemon.call("POST", "/v1/records", {"namespace": namespace, "kind": "doc", "title": "t", "body": "b"})
    assert status == 201
    eventually(
        lambda: daemon.call("GET", f"/v1/usage?namespace={quote(namespace)}")[1]["usage"],
        60,
        "a usage row for the namespace (the indexer's embedding)",
    )
    for args in (["usage", "-n", namespace], ["stats", "-n", namespace]):
        done = recalld(daemon, *args)
        assert done.returncode == 0, done.stderr
        assert "team\\u001b]0;pwned\\u0007" in done.stdout, repr(done.stdout)
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout, repr(done.stdout)


def test_usage_without_a_namespace_shows_the_daemons_own_work_as_system(daemon: Daemon) -> None:
    """An administrator's `recalld usage` covers every namespace and the start-up probe, which
    served no namespace: a row of its own, not a traceback."""
    done = recalld(daemon, "usage")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["namespace", "purpose", "provider", "calls", "tokens", "cost", "(µ)"], lines
    assert any(line.split()[:3] == ["(system)", "probe", "local"] for line in lines), lines
    assert lines[-1].startswith("client totals: "), lines


def test_a_printed_hit_shows_the_vector_cosine_that_min_similarity_compares() -> None:
    import msgspec

    from recalld.cli.recall import hit_lines
    from recalld.wire.recall import RecallHit

    hit = RecallHit(
        id=uuid.UUID("8f0c2d7e-0000-4000-8000-000000000001"),
        title="Nightly backups",
        kind="doc",
        source_path="/docs/backup.md",
        score=0.032258,
        routes={"fts": 3, "vector": 1},
        route_scores={"fts": 1.25, "vector": 0.53171},
        revision=1,
        snippet="The ledger is   dumped at 02:00\nto cold storage.",
    )
    assert hit_lines(1, hit) == [
        "  1. Nightly backups  (/docs/backup.md)",
        "     score 0.0323 from fts #3, vector #1 cos 0.53; id 8f0c2d7e-0000-4000-8000-000000000001",
        "     The ledger is dumped at 02:00 to cold storage.",
    ]
    older = msgspec.structs.replace(hit, route_scores={}, snippet=None)  # an older daemon's: no route scores
    assert hit_lines(2, older)[1] == "     score 0.0323 from fts #3, vector #1; id 8f0c2d7e-0000-4000-8000-000000000001"


def test_stats_prints_precision_at_k_and_where_useful_results_ranked(daemon: Daemon, ns: str) -> None:
    for title in ("Harbour rules", "Harbour fees", "Harbour hours"):
        status, _ = daemon.call(
            "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": title, "body": "harbour"}
        )
        assert status == 201
    judged = 0
    for useful_ranks in ((1,), (2,)):  # two searches: a useful first result, then a useful second one
        status, answer = daemon.call(
            "POST", "/v1/recall", {"namespace": ns, "query": "harbour", "routes": ["fts"], "k": 3}
        )
        assert status == 200 and len(answer["results"]) == 3, answer
        for rank, hit in enumerate(answer["results"][:2], 1):
            body = {"search_id": answer["search_id"], "id": hit["id"], "useful": rank in useful_ranks}
            assert daemon.call("POST", "/v1/recall/feedback", body)[0] == 200
            judged += 1
    done = recalld(daemon, "stats", "-n", ns, "-k", "3")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"namespace {ns}: 2 searches, 0 degraded, 0 empty", lines
    assert lines[1] == f"precision@3: 0.500 (2 useful of {judged} judged, 2 searches with feedback)", lines
    assert lines[2:] == ["rank of useful results:", f"    1 {'#' * 30} 1", f"    2 {'#' * 30} 1"], lines
