"""Duplicate checks over a daemon's socket: a dry run, the wait until a check compares with every
live title, and the usage rows the checks' embedding calls wrote."""

from __future__ import annotations

from typing import Any

from tests.support import Daemon, sql
from tests.support.waits import eventually

UNLIKE_ANY = "a title that is in no way like any other, zebra quartz"
"""A dry run's title that warns on nothing: the answer only counts what it compared."""


def dry_run(daemon: Daemon, ns: str, title: str, kind: str = "story") -> dict[str, Any]:
    """`POST /v1/duplicates/check`: what a create of `title` would be told, nothing written."""
    status, answer = daemon.call("POST", "/v1/duplicates/check", {"namespace": ns, "kind": kind, "title": title})
    assert status == 200, answer
    return dict(answer)


def wait_comparable(daemon: Daemon, ns: str, of: int, kind: str = "story", timeout: float = 120.0) -> None:
    """Until a dry run compares with every live title of the namespace and kind: the index
    manager's catch-up stores their vectors in the background, and each check embeds (here:
    keeps in memory, unstored) up to `[duplicates] catch_up_titles` of those still missing."""
    eventually(
        lambda: dry_run(daemon, ns, UNLIKE_ANY, kind),
        timeout,
        f"a check of {ns}/{kind} comparing with all {of} titles",
        accept=lambda answer: answer["status"] != "skipped" and answer["compared"] == answer["of"] == of,
        poll=0.2,
    )


def usage_rows(daemon: Daemon, purpose: str, ns: str) -> int:
    """The namespace's usage rows of `purpose` (one per provider call)."""
    # Usage rows are written a moment after the call (write-behind): GET /v1/usage flushes them.
    status, _ = daemon.call("GET", f"/v1/usage?namespace={ns}")
    assert status == 200
    rows = sql(
        daemon.env["RECALLD_STORE_DSN"], "SELECT count(*) FROM usage WHERE purpose = $1 AND namespace = $2", purpose, ns
    )
    return int(rows[0][0])
