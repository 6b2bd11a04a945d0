"""`[duplicates] enabled = false`: an operator turns the duplicate check off. Every write says so
(`skipped`, reason `disabled`), nothing is embedded or stored for titles, and the rest of the
daemon (recall by meaning included) works as before."""

from __future__ import annotations

from typing import Any

from tests.support import sql
from tests.support.waits import eventually

OFF = {"RECALLD_DUPLICATES_ENABLED": "false"}
DISABLED = {"status": "skipped", "reason": "disabled"}


def skipped_as_disabled(check: dict[str, Any]) -> bool:
    return {key: check.get(key) for key in DISABLED} == DISABLED


def test_a_daemon_with_the_check_off_says_so_on_every_write_and_embeds_no_title(
    make_daemon: Any, fresh_dsn: str
) -> None:
    daemon = make_daemon(env=OFF, dsn=fresh_dsn)
    record = {"namespace": "off", "kind": "story", "title": "Export the invoices as PDF", "body": "Invoices, as PDF."}
    status, created = daemon.call("POST", "/v1/records", record)
    assert status == 201 and skipped_as_disabled(created["duplicate_check"]), created
    twin = {**record, "title": "Download invoices in PDF format"}
    status, batch = daemon.call("POST", "/v1/records:batch", {"records": [twin]})
    assert status == 200 and skipped_as_disabled(batch["results"][0]["duplicate_check"]), batch
    status, renamed = daemon.call("PUT", f"/v1/records/{created['id']}", {**record, "title": "Invoices as PDF files"})
    assert status == 200 and skipped_as_disabled(renamed["duplicate_check"]), renamed
    status, dry = daemon.call("POST", "/v1/duplicates/check", {"namespace": "off", "kind": "story", "title": "PDF"})
    assert status == 200 and skipped_as_disabled(dry), dry
    status, audit = daemon.call("POST", "/v1/duplicates/audit", {"namespace": "off"})
    assert status == 503 and "enabled = false" in audit["error"]["message"], audit
    status, offered = daemon.call("GET", "/v1/capabilities")
    assert {c["name"]: c["available"] for c in offered["capabilities"]}["duplicates.v1"] is False

    # recall by meaning still works: the records are indexed, and no title vector was stored
    def found() -> Any:
        status, answer = daemon.call(
            "POST", "/v1/recall", {"namespace": "off", "query": "invoice documents", "routes": ["vector"], "k": 5}
        )
        return status == 200 and len(answer["results"]) == 2 and answer

    eventually(found, 120, "both records found by the vector route")
    assert sql(fresh_dsn, "SELECT count(*) AS n FROM title_vectors")[0]["n"] == 0


def test_with_the_check_on_the_same_writes_store_title_vectors(make_daemon: Any, fresh_dsn: str) -> None:
    """The other side of the switch, so that the test above cannot pass by accident."""
    daemon = make_daemon(dsn=fresh_dsn)
    status, created = daemon.call(
        "POST", "/v1/records", {"namespace": "on", "kind": "story", "title": "Export the invoices as PDF", "body": "x"}
    )
    assert status == 201 and created["duplicate_check"]["status"] == "clear", created
    eventually(
        lambda: sql(fresh_dsn, "SELECT count(*) AS n FROM title_vectors")[0]["n"] >= 1, 120, "the title's vector stored"
    )
