"""`recalld backup DEST` (a client of the running daemon: `Client.backup` streams and checks
it) and `recalld restore SRC` (the daemon stopped): the commands; the format and the checks
are daemon/wire/backup.py's."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from recalld.client import Client
from recalld.client.backup import DirectoryNotEmpty
from recalld.wire.backup import BackupError

EXIT_OK, EXIT_FAIL = 0, 1


def cmd_backup(client: Client, args: argparse.Namespace) -> int:
    dest = Path(args.dest).absolute()
    try:
        manifest = client.backup(dest)
    except DirectoryNotEmpty as exc:
        print(f"recalld: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except (BackupError, OSError) as exc:  # OSError: ConnectionError too, nothing was written
        print(f"recalld: backup failed: {exc}", file=sys.stderr)
        return EXIT_FAIL
    assert manifest.dump is not None
    records = manifest.counts.get("records", 0)
    print(
        f"backup of schema version {manifest.schema_version} in {dest}: {records} records, "
        f"{len(manifest.vector_spaces)} vector spaces, {manifest.dump.bytes} bytes (sha256 {manifest.dump.sha256})"
    )
    return EXIT_OK


def cmd_restore(args: argparse.Namespace) -> int:
    # here, not at the top: the server's side (PostgreSQL, the data directory's lock) is loaded
    # for this command alone, not for every client command
    from recalld.store.embedded import EmbeddedPostgresError
    from recalld.store.restore import restore_into_data_dir, restore_into_database

    source = Path(args.source).absolute()
    # Restored records are as private as the daemon's own files (see cmd_serve).
    os.umask(os.umask(0o077) | 0o077)
    try:
        if args.dsn:
            manifest = restore_into_database(source, args.dsn)
            where = "the database"
        else:
            data_dir = Path(args.data_dir).absolute()
            manifest = restore_into_data_dir(source, data_dir)
            where = str(data_dir)
    except (BackupError, EmbeddedPostgresError, OSError) as exc:
        print(f"recalld: restore failed: {exc}", file=sys.stderr)
        return EXIT_FAIL
    print(
        f"restored {manifest.counts.get('records', 0)} records (schema version {manifest.schema_version}) into "
        f"{where}; the daemon rebuilds {len(manifest.vector_spaces)} vector spaces from their stored vectors "
        "when it starts"
    )
    return EXIT_OK


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = sub.add_parser("backup", help="write a consistent backup of the running daemon's store (admin)")
    backup.add_argument("dest", help="a new or empty directory")
    restore = sub.add_parser("restore", help="restore a backup into an empty data directory or database")
    restore.add_argument("source", help="a directory written by `recalld backup`")
    target = restore.add_mutually_exclusive_group(required=True)
    target.add_argument("--data-dir", help="an empty or new data directory (the daemon stopped)")
    target.add_argument("--dsn", help="an empty database on an external PostgreSQL")
