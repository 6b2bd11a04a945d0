"""`recalld restore`: a backup directory (daemon/wire/backup.py) into an empty data directory or
database. The dump is checked against its manifest before, the rows after, and the generation
catalogue emptied, so that the daemon rebuilds each vector space from the stored vectors."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import asyncpg
import msgspec

from recalld.bringup import data_dir_lock
from recalld.store.backup import clear_generations, drop_restored, foreign_objects, table_counts
from recalld.store.embedded import EmbeddedPostgres, binaries
from recalld.store.migrations import available
from recalld.wire.backup import FORMAT, FORMAT_VERSION, MANIFEST_FILE, BackupError, Manifest, libpq_target, sha256_of

RESTORE_TIMEOUT_S = 24 * 3600.0
"""pg_restore of a large database takes as long as it takes; this only ends a hung one."""


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
    """Compare every table with the manifest (a mismatch drops what the restore made, leaving the
    target as empty as it was), drop the generations' catalogue, and take the planner's
    statistics, which a dump does not hold (why recall needs them: `PLANNED_AS_THEY_GROW` in
    daemon/store/vectors.py)."""
    conn = await asyncpg.connect(dsn)
    try:
        counts = await table_counts(conn)
        differ = {t: (n, counts.get(t)) for t, n in manifest.counts.items() if counts.get(t) != n}
        if differ:
            await drop_restored(conn)
            shown = ", ".join(f"{t}: {got} rows, {n} in the manifest" for t, (n, got) in sorted(differ.items()))
            raise BackupError(f"the restored database does not match the backup's manifest ({shown})")
        await clear_generations(conn)
        await conn.execute("ANALYZE")
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

    When it fails, what it made is removed again, and only that: everything in `data_dir` (which
    was empty), and `data_dir` itself and the folders above it when it made them; a directory
    that was there before stays."""
    manifest = read_manifest(source)
    dump = check_dump(source, manifest)
    if not data_dir_is_empty(data_dir):
        raise BackupError(f"the data directory {data_dir} is not empty: restore into an empty or new one")
    made = [folder for folder in (data_dir, *data_dir.parents) if not folder.exists()]  # deepest first
    try:
        with data_dir_lock(data_dir):  # the lock a daemon takes: none may start meanwhile
            server = EmbeddedPostgres(data_dir)
            try:
                dsn = server.start()
                _pg_restore(dump, dsn)
                asyncio.run(_finish(dsn, manifest))
            finally:
                server.stop()
    except BaseException:
        _remove_made(data_dir, made)
        raise
    return manifest


def _remove_made(data_dir: Path, made: list[Path]) -> None:
    """Empty `data_dir`, then remove the folders of `made` (deepest first) that are empty: one
    another process filled meanwhile is not ours alone to remove."""
    for entry in data_dir.iterdir() if data_dir.exists() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    for folder in made:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return  # not empty: the folders above it are not empty either
