"""`recalld ingest` and `recalld eval` read a folder and nothing outside it: a link (to a file or a
folder) that leads out is never read, and says so; a link inside adds nothing (its target is read
once, under its own name) and no loop holds the walk up. What ingest reads goes to the embedding
provider, which may be remote: a link must not carry someone else's file there."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support import Daemon, sql
from tests.support.cli import recalld

SECRET = "zebracorn"
"""A word only the files outside the corpus hold."""


def corpus_with_links(tmp_path: Path) -> Path:
    """tmp_path/corpus: one page, links out to a file and a folder, links inside (to the page,
    to the folder itself, from a subfolder back up), and elsewhere/ beside it with the secrets."""
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "drawer").mkdir(parents=True)
    (elsewhere / "secret.txt").write_text(f"The {SECRET} launch codes.\n")
    (elsewhere / "drawer" / "notes.md").write_text(f"# Drawer\n\nMore {SECRET} codes.\n")
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "guide.md").write_text("# Guide\n\nHow to grease the pump.\n")
    os.symlink(elsewhere / "secret.txt", corpus / "link.txt")
    os.symlink(elsewhere / "drawer", corpus / "shelf")
    os.symlink("../../elsewhere/secret.txt", corpus / "sub" / "relative.md")
    os.symlink(corpus / "guide.md", corpus / "alias.md")
    os.symlink(corpus, corpus / "loop")
    os.symlink("..", corpus / "sub" / "up")
    return corpus


def test_ingest_skips_links_out_of_the_folder_and_reads_each_file_inside_once(
    daemon: Daemon, ns: str, tmp_path: Path
) -> None:
    corpus = corpus_with_links(tmp_path)
    done = recalld(daemon, "ingest", str(corpus), "-n", ns, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["created"], summary["failed"]) == (1, []), summary
    skipped = dict(summary["skipped"])
    assert sorted(skipped) == ["link.txt", "shelf", "sub/relative.md"], skipped
    assert all("outside" in why and str(tmp_path / "elsewhere") in why for why in skipped.values()), skipped
    status, listed = daemon.call("GET", f"/v1/records?namespace={ns}")
    assert status == 200 and [(r["title"], r["source_path"]) for r in listed["records"]] == [
        ("Guide", str(corpus / "guide.md"))
    ]
    status, found = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": SECRET, "routes": ["fts"]})
    assert status == 200 and found["results"] == [], found


QUESTIONS = """
corpus = "a handbook of one page"

[[question]]
id = "pump"
question = "how do I grease the pump"
expected = "guide.md"
"""


def test_eval_refuses_a_corpus_with_a_link_out_of_it_before_reading_anything(daemon: Daemon, tmp_path: Path) -> None:
    corpus = corpus_with_links(tmp_path)
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "questions.toml").write_text(QUESTIONS)
    (golden / "corpus").symlink_to(corpus)
    before = sql(daemon.env["RECALLD_STORE_DSN"], "SELECT count(*) AS n FROM records")[0]["n"]
    done = recalld(daemon, "eval", str(golden), "--routes", "fts")
    assert done.returncode != 0, done.stdout
    assert "link.txt" in done.stderr and "outside" in done.stderr, done.stderr
    after = sql(daemon.env["RECALLD_STORE_DSN"], "SELECT count(*) AS n FROM records")[0]["n"]
    assert after == before, "nothing of the corpus was uploaded"
