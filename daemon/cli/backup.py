"""`recalld backup DEST` (a client of the running daemon: `Client.backup` streams and checks
it) and `recalld restore SRC` (the daemon stopped): the commands; the format and the checks
are daemon/wire/backup.py's."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from recalld.cli.connected import connected
from recalld.cli.output import EXIT_FAIL, EXIT_OK, Output
from recalld.cli.parser import Subparsers
from recalld.client import Client
from recalld.client.backup import DirectoryNotEmpty
from recalld.wire.backup import BackupError


def register(sub: Subparsers) -> None:
    backup = sub.add_parser("backup", help="write a consistent backup of the running daemon's store (admin)")
    backup.add_argument("dest", help="a new or empty directory")
    restore = sub.add_parser("restore", help="restore a backup into an empty data directory or database")
    restore.add_argument("source", help="a directory written by `recalld backup`")
    target = restore.add_mutually_exclusive_group(required=True)
    target.add_argument("--data-dir", help="an empty or new data directory (the daemon stopped)")
    target.add_argument("--dsn", help="an empty database on an external PostgreSQL")


def run(args: argparse.Namespace, out: Output) -> int:
    if args.command == "restore":  # the daemon is stopped: no socket to talk to
        return _restore(args, out)
    return connected(args, out, _backup)


def _backup(client: Client, args: argparse.Namespace, out: Output) -> int:
    dest = Path(args.dest).absolute()
    try:
        manifest = client.backup(dest)
    except DirectoryNotEmpty as exc:
        out.err(f"recalld: {exc}")
        return EXIT_FAIL
    except (BackupError, OSError) as exc:  # OSError: ConnectionError too, nothing was written
        out.err(f"recalld: backup failed: {exc}")
        return EXIT_FAIL
    assert manifest.dump is not None
    records = manifest.counts.get("records", 0)
    out.print(
        f"backup of schema version {manifest.schema_version} in {dest}: {records} records, "
        f"{len(manifest.vector_spaces)} vector spaces, {manifest.dump.bytes} bytes (sha256 {manifest.dump.sha256})"
    )
    return EXIT_OK


def _restore(args: argparse.Namespace, out: Output) -> int:
    # here, not at the top: the server's side (PostgreSQL, the data directory's lock) is loaded
    # for this command alone, not for every client command
    from recalld.store.embedded import EmbeddedPostgresError
    from recalld.store.restore import restore_into_data_dir, restore_into_database

    source = Path(args.source).absolute()
    # Restored records are as private as the daemon's own files (see `recalld serve`).
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
        out.err(f"recalld: restore failed: {exc}")
        return EXIT_FAIL
    out.print(
        f"restored {manifest.counts.get('records', 0)} records (schema version {manifest.schema_version}) into "
        f"{where}; the daemon rebuilds {len(manifest.vector_spaces)} vector spaces from their stored vectors "
        "when it starts"
    )
    return EXIT_OK
