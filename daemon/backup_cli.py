"""`recalld backup DEST` (a client of the running daemon) and `recalld restore SRC` (the daemon
stopped): the commands; the format and the checks are daemon/backup.py's."""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

import httpx
import msgspec

from daemon.backup import DUMP_FILE, MANIFEST_FILE, BackupError, DumpFile, Manifest
from daemon.client import Client, ClientError

EXIT_OK, EXIT_FAIL = 0, 1
MANIFEST_LINE_MAX = 16 << 20
"""The manifest line is a few kilobytes (one count per table, one entry per vector space)."""
READ_TIMEOUT_S = 600.0
"""The longest pause in the dump's stream before the client gives up (a stalled daemon)."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BackupClient(Client):
    """The socket client, reading one streamed answer into files instead of JSON."""

    def download(self, dest: Path) -> Manifest:
        """Write the dump to `dest`/database.dump and return the manifest that came with it,
        its `dump` entry filled in; nothing is left under `dest` when the stream breaks off."""
        self._check_directory()
        partial = dest / (DUMP_FILE + ".partial")
        digest = hashlib.sha256()
        size = 0
        timeout = httpx.Timeout(self._http.timeout.connect, read=READ_TIMEOUT_S)
        try:
            with self._http.stream("GET", "/admin/backup", timeout=timeout) as response:
                if response.status_code >= 400:
                    body = response.read()
                    try:
                        payload = msgspec.json.decode(body)
                    except msgspec.DecodeError:
                        payload = body.decode(errors="replace")
                    raise ClientError(response.status_code, payload)
                stream = response.iter_bytes()
                head = bytearray()
                for chunk in stream:
                    head.extend(chunk)
                    if b"\n" in head or len(head) > MANIFEST_LINE_MAX:
                        break
                line, newline, rest = bytes(head).partition(b"\n")
                if not newline:
                    raise BackupError("the daemon's answer did not begin with a manifest")
                manifest = msgspec.json.decode(line, type=Manifest)
                with open(partial, "xb") as out:
                    out.write(rest)
                    digest.update(rest)
                    size += len(rest)
                    for chunk in stream:
                        out.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                    out.flush()
                    os.fsync(out.fileno())
        except httpx.TransportError as exc:
            partial.unlink(missing_ok=True)
            raise BackupError(f"the dump broke off after {size} bytes: {exc}") from exc
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if size == 0:
            partial.unlink(missing_ok=True)
            raise BackupError("the daemon sent an empty dump")
        partial.rename(dest / DUMP_FILE)
        return msgspec.structs.replace(manifest, dump=DumpFile(file=DUMP_FILE, bytes=size, sha256=digest.hexdigest()))


def cmd_backup(client: Client, args: argparse.Namespace) -> int:
    dest = Path(args.dest).absolute()
    made = not dest.exists()
    try:
        if not made and any(dest.iterdir()):
            print(f"recalld: {dest} is not empty: back up into a new or empty directory", file=sys.stderr)
            return EXIT_FAIL
        dest.mkdir(mode=0o700, parents=True, exist_ok=True)  # records are in it: the owner's alone
        downloader = BackupClient(client.socket_path)
        try:
            manifest = downloader.download(dest)
        finally:
            downloader.close()
        # the manifest last, once the dump is whole on disk: a directory without one is no backup
        scratch = dest / (MANIFEST_FILE + ".partial")
        scratch.write_bytes(msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")
        scratch.rename(dest / MANIFEST_FILE)
        _fsync_dir(dest)
    except (BackupError, OSError, msgspec.DecodeError) as exc:
        if made:
            for leftover in dest.iterdir() if dest.exists() else ():
                leftover.unlink()
            dest.rmdir()
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
    from daemon.restore import restore_into_data_dir, restore_into_database
    from daemon.store.embedded import EmbeddedPostgresError

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
