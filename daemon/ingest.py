"""`recalld ingest PATH`: a folder of text and markdown files becomes records with `source_path`.

Each file is one record, found again by its absolute path: an unchanged file is a no-op (the
daemon keeps the revision when nothing changed), a changed one becomes a new revision. The
title is the file's first markdown heading, else its name.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from daemon.client import ClientError

SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ".text"})


class JsonClient(Protocol):
    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None) -> Any: ...


@dataclass
class Summary:
    created: int = 0
    updated: int = 0
    unchanged: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)

    def line(self) -> str:
        text = f"ingested: {self.created} created, {self.updated} updated, {self.unchanged} unchanged"
        if self.failed:
            text += f", {len(self.failed)} failed: " + "; ".join(f"{p}: {why}" for p, why in self.failed[:5])
        return text


def title_of(path: Path, text: str) -> str:
    for line in text.splitlines()[:50]:
        stripped = line.strip()
        if stripped.startswith("#"):
            heading = stripped.lstrip("#").strip()
            if heading:
                return heading[:300]
    return path.stem.replace("_", " ").replace("-", " ").strip() or path.name


def files_under(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)


class Progress:
    """A one-line progress bar on stderr; plain periodic lines when stderr is not a terminal."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.enabled = enabled
        self.tty = sys.stderr.isatty()

    def show(self, done: int) -> None:
        if not self.enabled or self.total == 0:
            return
        if self.tty:
            width = 30
            filled = width * done // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} files")
            if done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()
        elif done == self.total or done % max(1, self.total // 10) == 0:
            print(f"ingest: {done}/{self.total} files", file=sys.stderr)


def _write(client: JsonClient, record: dict[str, Any], relative: str) -> str:
    """Create or update the record of one file; returns created / updated / unchanged."""
    found = client.request(
        "GET", "/v1/records", params={"namespace": record["namespace"], "source_path": record["source_path"]}
    )["records"]
    if found:
        path = f"/v1/records/{found[0]['id']}"
        try:
            answer = client.request("PUT", path, record)
        except ClientError as exc:
            if exc.status != 409:
                raise
            # its title was told apart by its path when it was created: keep it that way
            answer = client.request("PUT", path, dict(record, title=f"{record['title']} ({relative})"))
        return "updated" if answer["changed"] else "unchanged"
    try:
        client.request("POST", "/v1/records", record)
    except ClientError as exc:
        if exc.status != 409:
            raise
        # Two files with the same heading: keep both, told apart by their path.
        client.request("POST", "/v1/records", dict(record, title=f"{record['title']} ({relative})"))
    return "created"


def ingest(client: JsonClient, root: Path, *, namespace: str, kind: str, progress: bool = True) -> Summary:
    root = root.resolve()
    files = files_under(root)
    summary = Summary()
    bar = Progress(len(files), progress)
    for done, path in enumerate(files, start=1):
        relative = str(path.relative_to(root)) if path != root else path.name
        try:
            str(path).encode("utf-8")  # a name that is not UTF-8 cannot travel as JSON text
            # utf-8-sig: a byte-order mark would hide the file's first heading
            text = path.read_text(encoding="utf-8-sig").replace("\x00", "")
        except (UnicodeError, OSError) as exc:
            summary.failed.append((relative.encode("utf-8", "replace").decode(), type(exc).__name__))
            bar.show(done)
            continue
        record = {
            "namespace": namespace,
            "kind": kind,
            "title": title_of(path, text),
            "body": text,
            "source_path": str(path),
        }
        try:
            outcome = _write(client, record, relative)
        except ClientError as exc:
            summary.failed.append((relative, str(exc)))
        else:
            setattr(summary, outcome, getattr(summary, outcome) + 1)
        bar.show(done)
    return summary
