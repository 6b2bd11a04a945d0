"""The man-page corpus of the recall benches: short real passages (at most 40 words, at most 30 a
page) cut from the Debian man pages in /usr/share/man (sections 1, 8, 5, 7, 3 in turn), in
file-name order, and queries: the pages' NAME descriptions ("an archiving utility") and option
names that occur in the passages ("--strip-components"), four in five descriptions."""

from __future__ import annotations

import gzip
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.lib.report import progress

MAN_DIRS = [Path(f"/usr/share/man/man{section}") for section in (1, 8, 5, 7, 3)]
NAMESPACE = "bench-recall"
"""The namespace `python -m bench.recall` stores the corpus in, and the benches on its data read."""
PASSAGE_WORDS = 40
MIN_WORDS = 8
PER_PAGE = 30

_ESCAPES = {r"\-": "-", r"\(em": "—", r"\(en": "–", r"\(aq": "'", r"\(dq": '"', r"\e": "\\", r"\ ": " ", r"\~": " "}
_OTHER_ESCAPE = re.compile(r"\\(f\[[^\]]*\]|f\(..|f.|\(..|\*\(..|\*\[[^\]]*\]|\*.|s[+-]?\d+|[&|^%c0dun])")
_BREAKS = {"SH", "SS", "PP", "P", "LP", "TP", "TQ", "IP", "HP", "sp", "br", "RS", "RE", "nf", "fi", "EX", "EE"}
_TEXT_MACROS = {"B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "SB", "IP"}
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9]+(?:-[a-z0-9]+)+\b")


def _plain(text: str) -> str:
    for escape, replacement in _ESCAPES.items():
        text = text.replace(escape, replacement)
    return _OTHER_ESCAPE.sub("", text).replace("\\", "")


def man_sections(source: str) -> Iterator[tuple[str, str]]:
    """(section name, paragraph text) of a man page's roff source, formatting removed."""
    paragraph: list[str]
    section, paragraph = "", []
    for line in source.splitlines():
        if line.startswith(('.\\"', "'\\\"", '.\\"')):
            continue
        if line.startswith((".", "'")):
            macro, _, rest = line[1:].strip().partition(" ")
            if macro in _BREAKS and paragraph:
                yield section, " ".join(paragraph)
                paragraph = []
            if macro == "SH":
                section = _plain(rest).strip('" ').upper()
            elif macro in _TEXT_MACROS and rest:
                paragraph.append(_plain(rest.replace('"', "")))
            continue
        paragraph.append(_plain(line))
    if paragraph:
        yield section, " ".join(paragraph)


@dataclass(frozen=True)
class Page:
    name: str
    description: str
    passages: list[str]


def read_page(path: Path) -> Page | None:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    source = raw.decode("utf-8", errors="replace")
    if source.lstrip().startswith(".so "):
        return None  # a redirect to another page
    passages: list[str]
    description, passages = "", []
    for section, text in man_sections(source):
        words = text.split()
        if section == "NAME" and not description:
            description = text.split(" - ", 1)[1].strip() if " - " in text else ""
            continue
        if section == "SYNOPSIS":
            continue
        for start in range(0, len(words), PASSAGE_WORDS):
            piece = words[start : start + PASSAGE_WORDS]
            if len(piece) >= MIN_WORDS and len(passages) < PER_PAGE:
                passages.append(" ".join(piece))
    name = path.name.removesuffix(".gz")
    return Page(name, description, passages) if passages else None


def build_corpus(n_passages: int, n_queries: int) -> dict[str, Any]:
    records: list[dict[str, str]] = []
    descriptions: list[str] = []
    options: set[str] = set()
    seen: set[str] = set()
    for path in (p for directory in MAN_DIRS if directory.is_dir() for p in sorted(directory.iterdir())):
        page = read_page(path)
        if page is None:
            continue
        for i, passage in enumerate(page.passages, start=1):
            if passage in seen:
                continue
            seen.add(passage)
            # one record per passage, and a source_path names one live record: the passage's own
            records.append({"title": f"{page.name} #{i}", "body": passage, "source_path": f"{path}#{i}"})
            options.update(_OPTION.findall(passage))
        if page.description and len(page.description.split()) >= 3:
            descriptions.append(page.description)
        if len(records) >= n_passages:
            break
    if len(records) < n_passages:
        raise SystemExit(
            f"only {len(records)} passages in the man pages; install the man pages (apt-get install man-db)"
        )
    records = records[:n_passages]
    rng = random.Random(20261130)
    n_options = n_queries // 5
    questions = rng.sample(sorted(set(descriptions)), n_queries - n_options) + rng.sample(sorted(options), n_options)
    rng.shuffle(questions)
    return {"records": records, "queries": questions}


def load_corpus(path: Path, n_passages: int, n_queries: int) -> dict[str, Any]:
    if path.exists():
        corpus: dict[str, Any] = json.loads(path.read_text())
        if len(corpus["records"]) == n_passages and len(corpus["queries"]) == n_queries:
            return corpus
    progress("building the corpus from the man pages")
    corpus = build_corpus(n_passages, n_queries)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(corpus))
    return corpus
