"""`recalld ingest` tells the truth: what it skipped and why (binary, empty, not UTF-8), files over
the size limit refused before upload, `--sync` forgetting the records of deleted files. A real
daemon; the CLI as a subprocess where its output is the point."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from recalld.actors.index.catch_up import index_chunks
from recalld.actors.index.settings import IndexSettings
from recalld.client import Client
from recalld.client.ingest import ingest
from tests.support import Daemon, namespace
from tests.support.cli import recalld
from tests.support.embedding_service import EmbeddingServer
from tests.support.other_users import as_user
from tests.support.pdf import pdf_bytes
from tests.support.terminal import in_terminal
from tests.support.waits import eventually


def titles(daemon: Daemon, ns: str) -> list[str]:
    status, answer = daemon.call("GET", f"/v1/records?namespace={ns}")
    assert status == 200
    return sorted(r["title"] for r in answer["records"])


def test_skipped_files_are_listed_with_why(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    (tmp_path / "README").write_text("Read me\n=======\n\nThe pump needs grease.\n")
    (tmp_path / "README.Debian").write_text("Debian notes about the pump.\n")
    (tmp_path / "guide.md").write_text("# Guide\n\nHow to grease the pump.\n")
    (tmp_path / "logo.png").write_bytes(b"\x89PNG\r\n")
    (tmp_path / "latin1.txt").write_bytes("Caf\xe9 notes".encode("latin-1"))
    done = recalld(daemon, "ingest", str(tmp_path), "-n", ns)
    assert done.returncode == 0, done.stderr
    assert "3 created" in done.stdout and "2 skipped" in done.stdout, done.stdout
    assert "skipped logo.png: extension .png" in done.stderr
    assert "skipped latin1.txt: not UTF-8 text (byte 0xe9 at offset 3)" in done.stderr
    assert "iconv" in done.stderr and "Traceback" not in done.stderr
    assert titles(daemon, ns) == ["Guide", "README", "Read me"]  # README.Debian: no title of its own, its stem


def test_binary_and_empty_files_are_skipped_saying_so(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    """A compressed changelog or a program named like a document is a binary file, not text in
    another encoding (iconv cannot help); an empty file is skipped, not stored under its name."""
    (tmp_path / "changelog.gz").write_bytes(gzip.compress(b"patch (2.7.6) unstable; urgency=medium\n"))
    (tmp_path / "install-helper").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(120))
    (tmp_path / "empty.md").write_bytes(b"")
    (tmp_path / "blank.txt").write_text("  \n\n\t\n")
    (tmp_path / "kept.md").write_text("# Kept\n\nthe one file with text\n")
    done = recalld(daemon, "ingest", str(tmp_path), "-n", ns)
    assert done.returncode == 0, done.stderr
    assert "1 created" in done.stdout and "4 skipped" in done.stdout, done.stdout
    assert "skipped changelog.gz: binary file (gzip-compressed; to read it, decompress it first: gunzip -k" in (
        done.stderr
    )
    assert "skipped install-helper: binary file (an ELF executable or library)" in done.stderr
    assert "skipped empty.md: empty file: nothing to recall" in done.stderr
    assert "skipped blank.txt: empty file: nothing to recall" in done.stderr
    assert "iconv" not in done.stderr and "Traceback" not in done.stderr
    assert titles(daemon, ns) == ["Kept"]


def test_html_and_pdf_files_go_in_as_their_text_under_their_title(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    page = '<html><head><meta charset="iso-8859-1"><title>Caf\xe9 hours</title></head><body><p>Open at nine.</p>'
    (tmp_path / "page.htm").write_bytes(page.encode("latin-1"))
    (tmp_path / "guide.pdf").write_bytes(pdf_bytes([["Grease the bearings monthly."]], title="Pump guide"))
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 cut short")
    done = recalld(daemon, "ingest", str(tmp_path), "-n", ns)
    assert done.returncode == 0, done.stderr
    assert "2 created" in done.stdout and "1 skipped" in done.stdout, done.stdout
    assert "skipped broken.pdf: not a readable PDF" in done.stderr
    assert titles(daemon, ns) == ["Café hours", "Pump guide"]
    for query, title in (("bearings", "Pump guide"), ("nine", "Café hours")):
        found = json.loads(recalld(daemon, "recall", "-n", ns, query, "--json").stdout)
        assert found["results"][0]["title"] == title, found


def test_a_file_over_the_limit_is_refused_before_upload(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    (tmp_path / "small.md").write_text("# Small\n\nfits\n")
    (tmp_path / "large.md").write_text("# Large\n\n" + "word " * 100)
    with Client(daemon.socket) as client:
        summary = ingest(client, tmp_path, namespace=ns, kind="doc", progress=False, max_chars=100)
    assert (summary.created, summary.failed) == (1, [])
    [(name, why)] = summary.skipped
    assert name == "large.md" and "over the limit of 100" in why and "max_body_chars" in why
    assert titles(daemon, ns) == ["Small"]  # the large one never reached the daemon


def test_the_limit_is_the_daemons_own(make_daemon: Any, tmp_path: Path) -> None:
    """A daemon configured below the default says its limit (GET /v1/capabilities), and ingest
    skips what it would refuse before anything is uploaded. This one has no embedding provider:
    ingest has nothing to wait for, and says so."""
    small: Daemon = make_daemon(env={"RECALLD_RECORDS_MAX_BODY_CHARS": "100", "RECALLD_EMBEDDING_PROVIDER": "none"})
    limits = small.call("GET", "/v1/capabilities")[1]["limits"]
    assert limits["max_body_chars"] == 100 and limits["max_k"] >= 1, limits
    (tmp_path / "small.md").write_text("# Small\n\nfits\n")
    (tmp_path / "large.md").write_text("# Large\n\n" + "word " * 100)
    done = recalld(small, "ingest", str(tmp_path), "-n", "limits")
    assert done.returncode == 0, done.stderr
    assert "1 created" in done.stdout and "1 skipped" in done.stdout, done.stdout
    assert "large.md" in done.stderr and "over the limit of 100" in done.stderr, done.stderr
    assert titles(small, "limits") == ["Small"]
    # a daemon without a provider has no vector index to wait for: --wait says so and succeeds
    again = recalld(small, "ingest", str(tmp_path), "-n", "limits", "--wait")
    assert again.returncode == 0 and "1 unchanged" in again.stdout, (again.stdout, again.stderr)
    assert "no vector index" in again.stdout, again.stdout


def test_sync_forgets_the_records_of_deleted_files(daemon: Daemon, ns: str, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("keep", "drop", "also-drop"):
        (docs / f"{name}.md").write_text(f"# {name}\n\nabout {name}\n")
    (tmp_path / "outside.md").write_text("# outside\n\nnot under docs\n")
    assert recalld(daemon, "ingest", str(tmp_path / "outside.md"), "-n", ns).returncode == 0
    assert recalld(daemon, "ingest", str(docs), "-n", ns).returncode == 0
    (docs / "drop.md").unlink()
    (docs / "also-drop.md").unlink()

    plain = recalld(daemon, "ingest", str(docs), "-n", ns)
    assert "forgotten" not in plain.stdout and len(titles(daemon, ns)) == 4  # without --sync: kept

    synced = recalld(daemon, "ingest", str(docs), "-n", ns, "--sync")
    assert synced.returncode == 0, synced.stderr
    assert "2 forgotten" in synced.stdout, synced.stdout
    assert titles(daemon, ns) == ["keep", "outside"]  # a record from outside the folder stays


def test_ingest_says_what_waits_for_the_vector_index_and_wait_follows_it(
    daemon: Daemon, ns: str, tmp_path: Path
) -> None:
    (tmp_path / "a.md").write_text("# Alpha\n\nthe first file\n")
    waited = recalld(daemon, "ingest", str(tmp_path), "-n", ns, "--wait")
    assert waited.returncode == 0, waited.stderr
    assert "indexed: the vector route finds all of them" in waited.stdout
    status, answer = daemon.call("GET", "/v1/generations")
    assert status == 200 and answer["pending"] == 0
    listed = json.loads(recalld(daemon, "recall", "-n", ns, "first file", "--json").stdout)
    assert listed["results"][0]["title"] == "Alpha"


def test_wait_follows_the_ingested_namespace_not_a_record_held_in_another(make_daemon: Any, tmp_path: Path) -> None:
    """`?namespace=` narrows `pending` to one namespace, so `ingest --wait` ends once its own
    files are indexed while another namespace's record stays held (the provider refuses it)."""
    fake = EmbeddingServer(dimension=48)
    try:
        ours, held = namespace(), namespace()
        daemon: Daemon = make_daemon(
            env={
                **fake.env(),
                "RECALLD_SERVER_SOCKET_MODE": str(0o666),  # let the access layer, not the file mode, decide
                "RECALLD_ACCESS_READERS": f'{{ "65534" = ["{held}"] }}',
            }
        )
        fake.refuse = "poison"
        status, _ = daemon.call(
            "POST", "/v1/records", {"namespace": held, "kind": "doc", "title": "P", "body": "poison"}
        )
        assert status == 201
        eventually(lambda: fake.refused, 20, "the provider refusing the held record at least once")

        (tmp_path / "a.md").write_text("# Alpha\n\nthe first file\n")
        # following the global `pending` would never end: the held record stays
        waited = recalld(daemon, "ingest", str(tmp_path), "-n", ours, "--wait", timeout=25)
        assert waited.returncode == 0, waited.stderr
        assert "indexed: the vector route finds all of them" in waited.stdout

        def pending(target: str) -> int:
            status, answer = daemon.call("GET", target)
            assert status == 200, answer
            return int(answer["pending"])

        assert pending(f"/v1/generations?namespace={ours}") == 0
        assert pending(f"/v1/generations?namespace={held}") >= 1
        assert pending("/v1/generations") >= 1, "without the parameter: every namespace, as before"

        status, answer = daemon.call("GET", "/v1/generations?namespace=a%00b")
        assert status == 400 and answer["error"]["code"] == "invalid_value", answer
        # a reader of `held` only: its own namespace answers, another's is refused
        allowed = as_user(daemon, 65534, "GET", f"/v1/generations?namespace={held}")
        assert allowed["status"] == 200 and allowed["body"]["pending"] >= 1, allowed
        refused = as_user(daemon, 65534, "GET", f"/v1/generations?namespace={ours}")
        assert refused["status"] == 403 and refused["body"]["error"]["code"] == "forbidden", refused
    finally:
        fake.close()


# -- `ingest --wait` in a terminal, as a person runs it

BAR = re.compile(r"\[[#.]{30}\] (\d+)/(\d+) (\w+) embedded")


def bars(output: str) -> list[tuple[int, int, str]]:
    """Every state the bar was drawn in, in order: (done, total, unit)."""
    return [(int(m[1]), int(m[2]), m[3]) for m in BAR.finditer(output)]


def corpus(root: Path, files: int, paragraphs: int) -> int:
    """Write `files` files of distinct text; returns the chunks the daemon embeds for them."""
    settings = IndexSettings(root=root)
    chunks = 0
    for f in range(files):
        text = f"# File {f}\n\n" + "\n\n".join(
            " ".join(f"word{f}x{p}x{w}" for w in range(60)) + "." for p in range(paragraphs)
        )
        (root / f"file{f:02}.md").write_text(text)
        chunks += len(index_chunks(text, settings))
    return chunks


def test_wait_counts_chunks_up_to_the_total_in_a_terminal(make_daemon: Any, tmp_path: Path) -> None:
    """The bar counts chunks, exactly as many as the daemon embeds; it never goes back and ends
    at its total. A slow provider (each call 0.3 s) makes the wait last several polls."""
    fake = EmbeddingServer(dimension=32)
    try:
        daemon: Daemon = make_daemon(env=fake.env())
        docs = tmp_path / "docs"
        docs.mkdir()
        total = corpus(docs, files=12, paragraphs=12)
        fake.delay_s = 0.3
        status, output = in_terminal(daemon, "ingest", str(docs), "-n", namespace(), "--wait")
        assert status == 0, output
        drawn = bars(output)
        waited = [(done, of) for done, of, unit in drawn if unit == "chunks"]
        assert waited, f"no bar counting chunks: {output[-1500:]}"
        assert {of for _, of in waited} == {total}, "the total is the chunks embedded, from the first poll on"
        dones = [done for done, _ in waited]
        assert dones == sorted(dones), f"the count went back: {dones}"
        assert dones[-1] == total
        assert "indexed: the vector route finds all of them" in output
        assert "Traceback" not in output
    finally:
        fake.close()


@pytest.mark.slow
def test_ctrl_c_while_waiting_says_the_daemon_goes_on_and_the_same_command_resumes(
    make_daemon: Any, tmp_path: Path
) -> None:
    fake = EmbeddingServer(dimension=32)
    try:
        daemon: Daemon = make_daemon(env=fake.env())
        docs = tmp_path / "docs"
        docs.mkdir()
        corpus(docs, files=3, paragraphs=4)
        ns = namespace()
        fake.down = True  # nothing gets embedded: the wait lasts until Ctrl-C
        status, output = in_terminal(
            daemon, "ingest", str(docs), "-n", ns, "--wait", interrupt_when=lambda _, out: " chunks embedded" in out
        )
        assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
        assert status == 130, output
        assert "the daemon goes on embedding" in output, output
        assert f"recalld ingest {docs} -n {ns} --wait" in output, "the command that resumes, to copy"

        fake.down = False
        again = recalld(daemon, "ingest", str(docs), "-n", ns, "--wait")
        assert again.returncode == 0, again.stderr
        assert "0 created, 0 updated, 3 unchanged" in again.stdout
        assert "indexed: the vector route finds all of them" in again.stdout
    finally:
        fake.close()
