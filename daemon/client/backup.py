"""The directory a backup streams into, for `Client.backup` and `AsyncClient.backup`: what
`GET /admin/backup` answers (daemon/wire/backup.py: a manifest line, then the dump) written and
checked as it arrives. Files only, no I/O to the daemon: the clients feed it the chunks.

Guarantees: the directory is new or empty, and made private (0700: records are in it); the
dump is written as `database.dump.partial`, fsynced, and renamed only once the stream ended
whole and non-empty; `manifest.json`, with the dump's size and SHA-256 filled in, is written
last, fsynced, and the directory fsynced, so a directory with a manifest holds a whole backup.
On any failure (`abandon`) the files written are removed, and the directory too if it was made
here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import BinaryIO

import msgspec

from recalld.wire.backup import DUMP_FILE, MANIFEST_FILE, BackupError, DumpFile, Manifest

MANIFEST_LINE_MAX = 16 << 20
"""The manifest line is a few kilobytes (one count per table, one entry per vector space)."""
READ_TIMEOUT_S = 600.0
"""The longest pause in the dump's stream before the client gives up (a stalled daemon)."""


class DirectoryNotEmpty(BackupError):
    """The directory given already holds something: a backup never goes over another."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BackupWriter:
    """One backup into `directory`: `prepare`, `take` each chunk of the answer, then `finish`;
    `abandon` after any failure."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.absolute()
        self.size = 0
        """Bytes of the dump taken so far."""
        self._made = False
        self._head = bytearray()
        self._manifest: Manifest | None = None
        self._out: BinaryIO | None = None
        self._digest = hashlib.sha256()
        self._written: list[Path] = []
        """What this backup put in the directory, for `abandon` to remove: never anything else."""

    @property
    def _partial(self) -> Path:
        return self.directory / (DUMP_FILE + ".partial")

    def prepare(self) -> None:
        """DirectoryNotEmpty unless the directory is new or empty; made (0700) if new."""
        made = not self.directory.exists()
        if not made and any(self.directory.iterdir()):
            raise DirectoryNotEmpty(f"{self.directory} is not empty: back up into a new or empty directory")
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._made = made

    def take(self, chunk: bytes) -> None:
        if self._out is None:
            self._head.extend(chunk)
            line, newline, rest = bytes(self._head).partition(b"\n")
            if not newline:
                if len(self._head) > MANIFEST_LINE_MAX:
                    raise BackupError("the daemon's answer did not begin with a manifest")
                return
            try:
                self._manifest = msgspec.json.decode(line, type=Manifest)
            except msgspec.DecodeError as exc:
                raise BackupError(f"the daemon's answer did not begin with a manifest: {exc}") from None
            self._out = open(self._partial, "xb")  # closed by finish or abandon
            self._written.append(self._partial)
            chunk = rest
        self._out.write(chunk)
        self._digest.update(chunk)
        self.size += len(chunk)

    def finish(self) -> Manifest:
        """Once the stream ended whole: the dump and then the manifest in place, on disk."""
        if self._out is None or self._manifest is None:
            raise BackupError("the daemon's answer did not begin with a manifest")
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        if self.size == 0:
            raise BackupError("the daemon sent an empty dump")
        self._partial.rename(self.directory / DUMP_FILE)
        self._written.append(self.directory / DUMP_FILE)
        dump = DumpFile(file=DUMP_FILE, bytes=self.size, sha256=self._digest.hexdigest())
        manifest = msgspec.structs.replace(self._manifest, dump=dump)
        # the manifest last, once the dump is whole on disk: a directory without one is no backup
        scratch = self.directory / (MANIFEST_FILE + ".partial")
        self._written.append(scratch)
        with open(scratch, "xb") as out:
            out.write(msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n")
            out.flush()
            os.fsync(out.fileno())
        scratch.rename(self.directory / MANIFEST_FILE)
        self._written.append(self.directory / MANIFEST_FILE)
        _fsync_dir(self.directory)
        return manifest

    def abandon(self) -> None:
        """Remove what this backup wrote (and its directory, if made here), nothing else; never
        raises."""
        if self._out is not None:
            self._out.close()
        for path in self._written:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass
        if self._made:
            try:
                self.directory.rmdir()
            except OSError:
                pass
