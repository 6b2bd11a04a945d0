"""The DSN as every connection of the daemon uses it: its pool, its connections of their own
(LISTEN, the builder lock, migrations) and PostgreSQL's tools (pg_dump).

A DSN may name several servers, as libpq's does: `postgresql://u@h1:5432,h2:5432/recalld` or
`postgresql://u@/recalld?host=h1,h2&port=5432,5432`. A connection tries them in turn and keeps
the first that `target_session_attrs` accepts; `read-write` accepts only a server that takes
writes, so that after a failover every new connection finds the promoted standby.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit

WRITABLE = "read-write"
"""The `target_session_attrs` the daemon connects with unless told otherwise: it writes on every
path (each recall records its telemetry), so a standby is of no use to it."""

SCHEMES = frozenset({"postgresql", "postgres"})


def writable_dsn(dsn: str, environ: Mapping[str, str] = os.environ) -> str:
    """`dsn` with `target_session_attrs=read-write` added when neither the DSN nor the
    environment (`PGTARGETSESSIONATTRS`) names one; otherwise, and for a string that is not a
    PostgreSQL URL (which the driver refuses on its own), `dsn` unchanged.

    With one host that is a standby, the connection is then refused (the store is unavailable
    until it is promoted) rather than made to a server that refuses every write.
    """
    parts = urlsplit(dsn)
    if parts.scheme not in SCHEMES or "PGTARGETSESSIONATTRS" in environ:
        return dsn
    if "target_session_attrs" in parse_qs(parts.query, keep_blank_values=True):
        return dsn
    # appended as text: urlunsplit would drop the `//` of a DSN with no host (`postgresql:///db`)
    base, hash_mark, fragment = dsn.partition("#")
    separator = "&" if parts.query else ("" if base.endswith("?") else "?")
    return f"{base}{separator}target_session_attrs={WRITABLE}{hash_mark}{fragment}"
