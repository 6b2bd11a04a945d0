"""`recalld ingest PATH`: a folder of text, markdown, HTML and PDF files becomes records with
`source_path` (HTML and PDF read by daemon/client/ingest_formats.py).

Each file is one record, found again by its absolute path: an unchanged file is a no-op (the
daemon keeps the revision when nothing changed), a changed one becomes a new revision. The
title is the one its markup gives it (`ingest_formats.text_title`), else its name. Files go up
in batches (`POST /v1/records:batch` with `upsert`), each written on its own.

What is not ingested is said, with why (`Summary.skipped`): a file of another kind, a binary one
(compressed, a program: `ingest_formats.binary_kind`), an empty one, one that is not UTF-8 text,
one over the size limit (refused here, before anything is uploaded), a link that leads out of
the folder (never read: `walk`). `sync` forgets the records of files that are gone from the
folder.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recalld.client import Client, ClientError
from recalld.client import ingest_formats as formats

SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ".text"})
DOC_NAMES = ("readme", "news", "changelog", "changes", "license", "copying", "install", "authors", "todo", "notice")
"""Files read whatever their extension (README, README.Debian, NEWS.old): text by convention."""
BATCH_FILES = 50
BATCH_BYTES = 2 * 1024 * 1024
"""A batch carries at most this much text (the daemon's request limit, `[server] max_body_bytes`,
is 8 MiB by default); a larger file goes alone."""


@dataclass
class Summary:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    forgotten: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(file, why) for each file not read: its kind, its encoding, its size."""

    def line(self) -> str:
        text = f"ingested: {self.created} created, {self.updated} updated, {self.unchanged} unchanged"
        if self.forgotten:
            text += f", {self.forgotten} forgotten (their files are gone)"
        if self.skipped:
            text += f", {len(self.skipped)} skipped"
        if self.failed:
            text += f", {len(self.failed)} failed: " + "; ".join(f"{p}: {why}" for p, why in self.failed[:5])
        return text

    def skipped_lines(self, limit: int = 20) -> list[str]:
        lines = [f"skipped {path}: {why}" for path, why in self.skipped[:limit]]
        if len(self.skipped) > limit:
            lines.append(f"... and {len(self.skipped) - limit} more skipped")
        return lines


def title_of(path: Path, text: str) -> str:
    """The title the file's markup gives it (`ingest_formats.text_title`: a `#` heading only in
    Markdown, an .rst file's document title), else its name."""
    return formats.text_title(path, text) or path.stem.replace("_", " ").replace("-", " ").strip() or path.name


def readable_kind(path: Path) -> bool:
    """Whether a file is one ingest reads: a text or markdown extension, or a conventional
    documentation name (README, NEWS, ...) with any extension or none."""
    suffix = path.suffix.lower()
    return suffix in SUFFIXES or suffix in formats.SUFFIXES or path.name.lower().startswith(DOC_NAMES)


@dataclass(frozen=True)
class Walk:
    files: list[Path]
    """The regular files under the folder (or the file itself), in name order, each once."""
    outside: list[tuple[Path, str]]
    """(link, why) for each link that leads out of the folder: never read."""


def walk(root: Path) -> Walk:
    """The files of the folder `root` (or `root`, a file), never one outside it.

    No link is followed. One that resolves outside `root` is listed in `outside`, saying where
    it leads: its file may be anybody's, and what ingest reads goes to the embedding provider,
    which may be remote. One that resolves inside names a file or folder the walk reaches under
    its own name anyway, so it adds nothing: no file is read twice, and no loop holds the walk.
    """
    if not root.is_dir():
        return Walk([root] if root.is_file() else [], [])
    base = root.resolve()
    files: list[Path] = []
    outside: list[tuple[Path, str]] = []
    for directory, folders, names in os.walk(base):  # lists links to folders, never enters them
        for name in [*folders, *names]:
            path = Path(directory, name)
            if path.is_symlink():
                target = Path(os.path.realpath(path))  # a loop does not raise: it resolves to itself
                if not target.is_relative_to(base):
                    outside.append((root / path.relative_to(base), f"a link to {target}, outside {root}: not read"))
            elif name in names and path.is_file():
                files.append(root / path.relative_to(base))
    return Walk(sorted(files), sorted(outside))


def not_utf8(error: UnicodeDecodeError) -> str:
    bad = error.object[error.start : error.start + 1].hex()
    return (
        f"not UTF-8 text (byte 0x{bad} at offset {error.start}); convert it first, e.g. "
        "iconv -f latin1 -t utf-8 FILE > FILE.utf8"
    )


EMPTY = "empty file: nothing to recall"


def too_large(size: int, limit: int, unit: str) -> str:
    return f"{size:,} {unit}, over the limit of {limit:,} ([records] max_body_chars)"


class Progress:
    """A one-line progress bar on stderr; plain periodic lines when stderr is not a terminal."""

    def __init__(self, total: int, enabled: bool, unit: str = "files") -> None:
        self.total = total
        self.enabled = enabled
        self.unit = unit
        self.tty = sys.stderr.isatty()
        self._shown: tuple[int, int, str] | None = None
        self._open = False
        """A bar is drawn on a terminal line not ended yet."""
        self._tenth = -1
        """The last tenth of the total printed (not on a terminal)."""

    def show(self, done: int, note: str = "", *, total: int | None = None, last: bool | None = None) -> None:
        """Draw `done` of the total (`total`, when given, becomes it: work may be added). The
        bar's line ends when it is full, unless `last` is False: more may be drawn on it."""
        if total is not None:
            self.total = total
        if not self.enabled or self.total == 0 or self._shown == (done, self.total, note):
            return
        self._shown = (done, self.total, note)
        if self.tty:
            width = 30
            filled = width * done // self.total
            line = f"[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} {self.unit}{note}"
            sys.stderr.write(f"\r{line}\x1b[K")  # erase what a longer line left
            self._open = not (done == self.total if last is None else last)
            if not self._open:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif done == self.total or done * 10 // self.total > self._tenth:  # a line per tenth
            self._tenth = done * 10 // self.total
            print(f"ingest: {done}/{self.total} {self.unit}{note}", file=sys.stderr)

    def close(self) -> None:
        """End a bar left unfinished (interrupted), so what follows starts on a line of its own."""
        if self._open:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self._open = False


@dataclass
class _File:
    relative: str
    record: dict[str, Any]


def _shown(root: Path, path: Path) -> str:
    relative = str(path.relative_to(root)) if path != root else path.name
    return relative.encode("utf-8", "replace").decode()


def _other_kinds(root: Path, paths: list[Path], summary: Summary) -> list[Path]:
    """The files ingest reads; the others are listed as skipped, with why."""
    read = []
    for path in paths:
        if readable_kind(path) or path == root:
            read.append(path)
            continue
        kind = f"extension {path.suffix}" if path.suffix else "no extension"
        names = ", ".join(sorted(SUFFIXES | formats.SUFFIXES))
        summary.skipped.append((_shown(root, path), f"{kind}: only {names} and README-like names are read"))
    return read


def _contents(path: Path, limit: int | None) -> tuple[int, bytes | None]:
    """The file's size and bytes (None when it has more than `limit`), opened without following
    a link: one put in the file's place since the walk is refused (ELOOP), not read."""
    with open(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        return size, handle.read() if limit is None or size <= limit else None


def _read(root: Path, paths: list[Path], max_chars: int | None, summary: Summary, seen: list[int]) -> Iterator[_File]:
    for path in paths:
        seen[0] += 1
        relative = str(path.relative_to(root)) if path != root else path.name
        shown = _shown(root, path)
        try:
            str(path).encode("utf-8")  # a name that is not UTF-8 cannot travel as JSON text
            size, content = _contents(path, None if max_chars is None else 4 * max_chars)
            if content is None:  # more bytes than the most characters could take: not read at all
                assert max_chars is not None
                summary.skipped.append((shown, too_large(size, max_chars, "bytes")))
                continue
            if formats.kind_of(path) is not None:
                document = formats.read(path, content)
                text, title = document.text, document.title or title_of(path, "")
            else:
                binary = formats.binary_kind(content, path.name)
                if binary is not None:  # not text in another encoding: iconv cannot help
                    summary.skipped.append((shown, binary))
                    continue
                # utf-8-sig: a byte-order mark would hide the file's first heading
                text = content.decode("utf-8-sig").replace("\x00", "")
                title = title_of(path, text)
        except formats.Unreadable as exc:
            summary.skipped.append((shown, str(exc)))
            continue
        except UnicodeDecodeError as exc:
            summary.skipped.append((shown, not_utf8(exc)))
            continue
        except (UnicodeError, OSError) as exc:
            summary.failed.append((shown, type(exc).__name__))
            continue
        if not text.strip():  # a record with no words: nothing to find it by
            summary.skipped.append((shown, EMPTY))
            continue
        if max_chars is not None and len(text) > max_chars:
            summary.skipped.append((shown, too_large(len(text), max_chars, "characters")))
            continue
        yield _File(relative, {"title": title, "body": text, "source_path": str(path)})


def _batches(files: Iterator[_File]) -> Iterator[list[_File]]:
    batch: list[_File] = []
    size = 0
    for file in files:
        weight = len(file.record["body"]) + 1024
        if batch and (len(batch) >= BATCH_FILES or size + weight > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(file)
        size += weight
    if batch:
        yield batch


def _send(client: Client, batch: list[_File], namespace: str, kind: str, summary: Summary) -> None:
    records = [{"namespace": namespace, "kind": kind, **file.record} for file in batch]
    answer = client.write_records(records, upsert=True)
    retry: list[_File] = []
    for file, result in zip(batch, answer.results, strict=True):
        if result.outcome != "failed":
            setattr(summary, result.outcome, getattr(summary, result.outcome) + 1)
        elif result.error is not None and result.error.code == "exact_duplicate" and not file.record.get("retried"):
            # Two files with the same heading: keep both, told apart by their path.
            title = f"{file.record['title']} ({file.relative})"
            retry.append(_File(file.relative, dict(file.record, title=title, retried=True)))
        else:
            error = result.error
            summary.failed.append((file.relative, f"{error.code}: {error.message}" if error else "failed"))
    if retry:
        for file in retry:
            file.record.pop("retried")
        _send(client, retry, namespace, kind, summary)


def _forget_gone(client: Client, root: Path, namespace: str, summary: Summary) -> None:
    """Forget the namespace's records whose source file under `root` no longer exists."""
    prefix = str(root) if root.is_file() else f"{root}/"
    gone: list[str] = []
    after: str | None = None
    while True:
        page = client.list_records(namespace, limit=1000, after=uuid.UUID(after) if after else None)
        for record in page["records"]:
            source = record.get("source_path") or ""
            if (source == str(root) or source.startswith(prefix)) and not Path(source).exists():
                gone.append(record["id"])
        after = page["next"]
        if not after:
            break
    for record_id in gone:
        try:
            client.forget_record(record_id)
        except ClientError as exc:
            if exc.status != 404:  # forgotten meanwhile: what was asked is done
                raise
        summary.forgotten += 1


def body_limit(client: Client) -> int:
    """The daemon's `[records] max_body_chars`, from `GET /v1/capabilities`."""
    return client.capabilities().limits.max_body_chars


def ingest(
    client: Client,
    root: Path,
    *,
    namespace: str,
    kind: str,
    progress: bool = True,
    sync: bool = False,
    max_chars: int | None = None,
) -> Summary:
    """Upload the files under `root` as records of `namespace`; with `sync`, also forget the
    records of files gone from it. `max_chars`: files larger than this are skipped before upload
    (None: the daemon's own `[records] max_body_chars`, asked for; a daemon that does not say
    refuses such a file itself, and the file is listed as failed)."""
    root = root.resolve()
    limit = max_chars if max_chars is not None else body_limit(client)
    summary = Summary()
    walked = walk(root)
    summary.skipped += [(_shown(root, link), why) for link, why in walked.outside]
    paths = _other_kinds(root, walked.files, summary)
    bar = Progress(len(paths), progress)
    seen = [0]  # files read so far (sent, skipped or failed)
    for batch in _batches(_read(root, paths, limit, summary, seen)):
        try:
            _send(client, batch, namespace, kind, summary)
        except ClientError as exc:
            summary.failed.extend((file.relative, str(exc)) for file in batch)
        bar.show(seen[0])
    if seen[0] != len(paths) or not paths:
        bar.show(len(paths))
    if sync:
        _forget_gone(client, root, namespace, summary)
    return summary
