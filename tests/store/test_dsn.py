"""DSNs naming several hosts: the daemon connects only to a server that takes writes unless the
DSN (or PGTARGETSESSIONATTRS) says otherwise, and PostgreSQL's tools (pg_dump for a backup)
get the hosts as written, with the password moved to their environment."""

from __future__ import annotations

import pytest

from recalld.store.dsn import writable_dsn
from recalld.wire.backup import libpq_target

WRITABLE_CASES = [
    # (configured, environment, used)
    ("postgresql://u@h/db", {}, "postgresql://u@h/db?target_session_attrs=read-write"),
    ("postgresql://u@h1:5432,h2:5433/db", {}, "postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write"),
    (
        "postgresql://u@/db?host=/run/a,/run/b&port=5432,5432",
        {},
        "postgresql://u@/db?host=/run/a,/run/b&port=5432,5432&target_session_attrs=read-write",
    ),
    ("postgresql:///db?host=/tmp", {}, "postgresql:///db?host=/tmp&target_session_attrs=read-write"),
    ("postgres://u@h/db?", {}, "postgres://u@h/db?target_session_attrs=read-write"),
    # the DSN's own choice stands, whatever it is
    ("postgresql://u@h1,h2/db?target_session_attrs=any", {}, "postgresql://u@h1,h2/db?target_session_attrs=any"),
    (
        "postgresql://u@h1,h2/db?target_session_attrs=primary",
        {},
        "postgresql://u@h1,h2/db?target_session_attrs=primary",
    ),
    # so does the environment's, which the driver reads when the DSN names none
    ("postgresql://u@h1,h2/db", {"PGTARGETSESSIONATTRS": "any"}, "postgresql://u@h1,h2/db"),
    # not a URL: left for the driver to refuse
    ("host=h1,h2 dbname=db", {}, "host=h1,h2 dbname=db"),
    ("", {}, ""),
]


@pytest.mark.parametrize(("configured", "environ", "used"), WRITABLE_CASES)
def test_the_daemon_connects_to_a_writable_server_unless_told_otherwise(
    configured: str, environ: dict[str, str], used: str
) -> None:
    assert writable_dsn(configured, environ) == used


TOOL_CASES = [
    # (dsn, --dbname=..., PGPASSWORD)
    (
        "postgresql://u:pw@h1:5432,h2:5433/db?target_session_attrs=read-write",
        "postgresql://u@h1:5432,h2:5433/db?target_session_attrs=read-write",
        "pw",
    ),
    ("postgresql://u:p%40ss@h1,h2/db", "postgresql://u@h1,h2/db", "p@ss"),
    ("postgresql://u:pw@h1:5432,h2/db", "postgresql://u@h1:5432,h2/db", "pw"),
    ("postgresql://u:pw@[::1]:5432/db", "postgresql://u@[::1]:5432/db", "pw"),
    ("postgresql://u@/db?host=/run/a,/run/b&port=1,2", "postgresql://u@/db?host=/run/a,/run/b&port=1,2", None),
]


@pytest.mark.parametrize(("dsn", "dbname", "password"), TOOL_CASES)
def test_the_tools_get_every_host_and_the_password_by_environment(
    dsn: str, dbname: str, password: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    target, env = libpq_target(dsn)
    assert target == f"--dbname={dbname}"
    assert env.get("PGPASSWORD") == password
