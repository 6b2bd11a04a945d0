"""Backups of the canonical store (docs/OPERATIONS.md, "Backup and restore"): the format.

A backup is a directory: `database.dump`, PostgreSQL's own archive (`pg_dump --format=custom`,
taken by the running daemon in one snapshot while it keeps serving), and `manifest.json`, what
that snapshot held (schema version, vector spaces, rows per table) and the dump's size and
SHA-256. Generations are not in it: they are derived data, rebuilt from the stored vectors.

On the wire (`GET /admin/backup`, administrators only) the answer is the manifest as one line of
JSON, a newline, then the dump's bytes, chunked; a dump that fails half-way breaks the
connection off before the last chunk, so a client never takes a truncated dump for a whole one.

A restore (daemon/store/restore.py) goes into an empty data directory (the embedded server,
initialised afresh) or an empty database (`--dsn`), checks the dump against its manifest before
and the rows against it after, and empties the generation catalogue so that the daemon rebuilds
each vector space when it starts (`daemon/store/backup.py`).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec

FORMAT = "recalld-backup"
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
DUMP_FILE = "database.dump"
CONTENT_TYPE = "application/x-recalld-backup"


class BackupError(RuntimeError):
    """A backup or a restore that cannot go on; the message says why and what to do."""


class DumpFile(msgspec.Struct, frozen=True):
    file: str
    bytes: int
    sha256: str


class Manifest(msgspec.Struct, frozen=True):
    format: str
    format_version: int
    created_at: str
    schema_version: int
    server_version: str
    counts: dict[str, int]
    vector_spaces: list[dict[str, Any]]
    dump: DumpFile | None = None
    """Filled by the writer of the directory, once the whole dump is on disk."""


def libpq_target(dsn: str) -> tuple[str, dict[str, str]]:
    """`--dbname=DSN` for PostgreSQL's tools, and their environment: a password in the DSN goes
    by environment (PGPASSWORD), never on a command line that `ps` shows. The hosts go on as
    written: several (`h1:5432,h2:5432`, which libpq tries in turn) or an IPv6 address."""
    netloc = urlsplit(dsn).netloc
    env = dict(os.environ)
    userinfo, at, hosts = netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    if at and colon:
        env["PGPASSWORD"] = unquote(password)
        dsn = dsn.replace(f"//{netloc}", f"//{user}@{hosts}", 1)
    return f"--dbname={dsn}", env


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
