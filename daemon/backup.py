"""Backups of the canonical store, and restoring one (docs/OPERATIONS.md, "Backup and restore").

A backup is a directory: `database.dump`, PostgreSQL's own archive (`pg_dump --format=custom`,
taken by the running daemon in one snapshot while it keeps serving), and `manifest.json`, what
that snapshot held (schema version, vector spaces, rows per table) and the dump's size and
SHA-256. Generations are not in it: they are derived data, rebuilt from the stored vectors.

On the wire (`GET /admin/backup`, administrators only) the answer is the manifest as one line of
JSON, a newline, then the dump's bytes, chunked; a dump that fails half-way breaks the
connection off before the last chunk, so a client never takes a truncated dump for a whole one.

A restore (`restore`) goes into an empty data directory (the embedded server, initialised
afresh) or an empty database (`--dsn`), checks the dump against its manifest before and the
rows against it after, and empties the generation catalogue so that the daemon rebuilds each
vector space when it starts (`daemon/store/backup.py`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import msgspec

from daemon.store.backup import DUMP_FORMAT, Snapshot, clear_generations, foreign_objects, table_counts
from daemon.store.embedded import EmbeddedPostgres, binaries
from daemon.store.migrations import available

FORMAT = "recalld-backup"
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
DUMP_FILE = "database.dump"
CONTENT_TYPE = "application/x-recalld-backup"
RESTORE_TIMEOUT_S = 24 * 3600.0
"""pg_restore of a large database takes as long as it takes; this only ends a hung one."""


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


def manifest_of(snapshot: Snapshot) -> Manifest:
    return Manifest(
        format=FORMAT,
        format_version=FORMAT_VERSION,
        created_at=dt.datetime.now(dt.UTC).isoformat(),
        schema_version=snapshot.schema_version,
        server_version=snapshot.server_version,
        counts=snapshot.counts,
        vector_spaces=snapshot.vector_spaces,
    )


def libpq_target(dsn: str) -> tuple[str, dict[str, str]]:
    """`--dbname=DSN` for PostgreSQL's tools, and their environment: a password in the DSN goes
    by environment (PGPASSWORD), never on a command line that `ps` shows."""
    parts = urlsplit(dsn)
    env = dict(os.environ)
    if parts.password is not None:
        env["PGPASSWORD"] = parts.password
        netloc = f"{parts.username or ''}@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
        dsn = urlunsplit(parts._replace(netloc=netloc))
    return f"--dbname={dsn}", env


def dump_command(dsn: str, snapshot_id: str) -> tuple[list[str], dict[str, str]]:
    """pg_dump's argv and environment: the wheel's pg_dump (the embedded server's own version),
    in the snapshot the daemon exported."""
    target, env = libpq_target(dsn)
    argv = [
        str(binaries() / "pg_dump"),
        f"--format={DUMP_FORMAT}",
        f"--snapshot={snapshot_id}",
        "--no-password",
        target,
    ]
    return argv, env


# -- reading a backup directory


def read_manifest(source: Path) -> Manifest:
    try:
        manifest = msgspec.json.decode((source / MANIFEST_FILE).read_bytes(), type=Manifest)
    except FileNotFoundError:
        raise BackupError(f"{source} is not a recalld backup: no {MANIFEST_FILE}") from None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BackupError(f"{source / MANIFEST_FILE} cannot be read: {exc}") from None
    if manifest.format != FORMAT or manifest.format_version != FORMAT_VERSION:
        raise BackupError(
            f"{source} is a {manifest.format} backup of format {manifest.format_version}; this recalld reads "
            f"{FORMAT} format {FORMAT_VERSION}"
        )
    if manifest.dump is None:
        raise BackupError(f"{source / MANIFEST_FILE} names no dump: the backup did not finish")
    known = available()[-1].version
    if manifest.schema_version > known:
        raise BackupError(
            f"the backup's schema is at version {manifest.schema_version}, but this recalld knows migrations only "
            f"up to {known}: restore it with the recalld that wrote it, or a newer one"
        )
    return manifest


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def check_dump(source: Path, manifest: Manifest) -> Path:
    """The dump file, once its size and SHA-256 match the manifest's."""
    assert manifest.dump is not None
    dump = source / manifest.dump.file
    try:
        size = dump.stat().st_size
    except OSError as exc:
        raise BackupError(f"the dump {dump} cannot be read: {exc}") from None
    if size != manifest.dump.bytes:
        raise BackupError(f"the dump {dump} has {size} bytes, the manifest says {manifest.dump.bytes}: it is damaged")
    if sha256_of(dump) != manifest.dump.sha256:
        raise BackupError(f"the dump {dump} does not match its SHA-256 in the manifest: it is damaged")
    return dump


# -- restoring


def _pg_restore(dump: Path, dsn: str) -> None:
    """The whole archive in one transaction: a failure leaves the target as empty as it was."""
    target, env = libpq_target(dsn)
    done = subprocess.run(
        [
            str(binaries() / "pg_restore"),
            "--exit-on-error",
            "--single-transaction",
            "--no-owner",
            "--no-privileges",
            "--no-password",
            target,
            str(dump),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=RESTORE_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise BackupError(f"pg_restore failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


async def _check_empty(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        found = await foreign_objects(conn)
    finally:
        await conn.close()
    if found:
        raise BackupError(f"the target database is not empty (it holds {', '.join(found)}): restore into an empty one")


async def _finish(dsn: str, manifest: Manifest) -> None:
    """Compare every table with the manifest, then drop the generations' catalogue."""
    conn = await asyncpg.connect(dsn)
    try:
        counts = await table_counts(conn)
        differ = {t: (n, counts.get(t)) for t, n in manifest.counts.items() if counts.get(t) != n}
        if differ:
            shown = ", ".join(f"{t}: {got} rows, {n} in the manifest" for t, (n, got) in sorted(differ.items()))
            raise BackupError(f"the restored database does not match the backup's manifest ({shown})")
        await clear_generations(conn)
    finally:
        await conn.close()


def restore_into_database(source: Path, dsn: str) -> Manifest:
    """Restore `source` into the empty database `dsn` (an external server)."""
    manifest = read_manifest(source)
    dump = check_dump(source, manifest)
    asyncio.run(_check_empty(dsn))
    _pg_restore(dump, dsn)
    asyncio.run(_finish(dsn, manifest))
    return manifest


def data_dir_is_empty(data_dir: Path) -> bool:
    try:
        return not any(data_dir.iterdir())
    except FileNotFoundError:
        return True


def restore_into_data_dir(source: Path, data_dir: Path) -> Manifest:
    """Restore `source` into a new embedded server in the empty (or absent) `data_dir`.
    Everything it made is removed again when it fails: the directory was empty before."""
    from daemon.bringup import data_dir_lock  # the lock a daemon takes: none may start meanwhile

    manifest = read_manifest(source)
    dump = check_dump(source, manifest)
    if not data_dir_is_empty(data_dir):
        raise BackupError(f"the data directory {data_dir} is not empty: restore into an empty or new one")
    try:
        with data_dir_lock(data_dir):
            server = EmbeddedPostgres(data_dir)
            try:
                dsn = server.start()
                _pg_restore(dump, dsn)
                asyncio.run(_finish(dsn, manifest))
            finally:
                server.stop()
    except BaseException:
        for entry in data_dir.iterdir() if data_dir.exists() else ():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        raise
    return manifest
