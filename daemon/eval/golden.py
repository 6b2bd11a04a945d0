"""A golden set as a user writes it: a corpus of files and questions with the files that answer
them (docs/EVAL.md). Loading checks everything that can be checked before the daemon
is asked anything, and says what is wrong where.

Two shapes:

- a folder: `GOLDEN/questions.toml`, the corpus in `GOLDEN/corpus/` (or where the TOML's
  `corpus_path` says), the floor in `GOLDEN/floor.json`;
- a TOML file `SET.toml` whose `corpus_path` names the corpus (relative to the file), the floor
  beside it in `SET.floor.json`.

A question's `expected` names corpus files by their path relative to the corpus, with or without
the suffix (`guide/install.md` or `guide/install`); they are resolved here to the one form the
answers are compared in, the relative path with its suffix.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recalld.client.ingest import SUFFIXES, readable_kind, walk

QUESTIONS_FILE = "questions.toml"
CORPUS_DIR = "corpus"
FOLDER_FLOOR = "floor.json"
DEFAULT_KIND = "question"

_TOP_KEYS = frozenset({"name", "corpus", "corpus_path", "group", "question"})
_QUESTION_KEYS = frozenset({"id", "question", "expected", "kind"})
_NOTE_KEYS = frozenset({"area", "evidence", "fresh", "note"})
"""Keys a question may carry for its readers (where its answer was checked, when it was written);
the eval ignores them."""
_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


class GoldenSetError(Exception):
    """The golden set cannot be evaluated as written; the message says where and why."""


@dataclass(frozen=True)
class GoldenQuestion:
    id: str
    kind: str
    text: str
    expected: tuple[str, ...]
    """Corpus-relative paths (POSIX, with suffix), best first."""


@dataclass(frozen=True)
class GoldenSet:
    name: str
    """What the runs of this set are recorded under, and part of its namespace."""
    description: str
    source: Path
    """The questions' TOML file."""
    corpus: Path
    floor_path: Path
    questions: tuple[GoldenQuestion, ...]
    files: tuple[str, ...]
    """The corpus files the eval ingests, relative paths (what `recalld ingest` reads)."""

    @property
    def kinds(self) -> list[str]:
        return list(dict.fromkeys(q.kind for q in self.questions))

    def relative(self, source_path: str | None) -> str | None:
        """A result's `source_path` as a corpus-relative path; None for a record from elsewhere."""
        if not source_path:
            return None
        try:
            return Path(source_path).relative_to(self.corpus).as_posix()
        except ValueError:
            return None


def slug(name: str) -> str:
    """`name` as it may appear in a namespace: letters, digits, `_.-`; the rest folded to `-`."""
    return _NAME.sub("-", name).strip("-.") or "golden"


def load(path: Path, *, corpus: Path | None = None) -> GoldenSet:
    """Read and check the golden set at `path` (a folder or a TOML file); `corpus` overrides
    where its corpus is. Raises GoldenSetError naming the file, question and field at fault."""
    path = path.absolute()
    if path.is_dir():
        source, floor_path, default_corpus = path / QUESTIONS_FILE, path / FOLDER_FLOOR, path / CORPUS_DIR
        name = path.name
        if not source.is_file():
            raise GoldenSetError(
                f"{path}: a golden set folder holds {QUESTIONS_FILE} (and its corpus in {CORPUS_DIR}/)"
            )
    elif path.is_file():
        source, floor_path, default_corpus = path, path.with_name(f"{path.stem}.floor.json"), None
        name = path.stem
    else:
        raise GoldenSetError(f"{path}: no such folder or TOML file")
    try:
        data = tomllib.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise GoldenSetError(f"{source}: cannot read it: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise GoldenSetError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise GoldenSetError(f"{source}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(_TOP_KEYS))})")
    name = _text(data, "name", source, "the set") or name
    description = _text(data, "corpus", source, "the set") or name

    if corpus is None:
        named = _text(data, "corpus_path", source, "the set")
        corpus = (source.parent / named) if named else default_corpus
    if corpus is None:
        raise GoldenSetError(f'{source}: say where the corpus is: corpus_path = "..." (relative to this file)')
    corpus = corpus.absolute().resolve()
    if not corpus.is_dir():
        raise GoldenSetError(f"{source}: the corpus {corpus} is not a folder")
    walked = walk(corpus)
    if walked.outside:
        # what the eval reads goes to the embedding provider: someone else's file must not
        links = "; ".join(f"{link.relative_to(corpus).as_posix()}: {why}" for link, why in walked.outside[:5])
        more = f" (and {len(walked.outside) - 5} more)" if len(walked.outside) > 5 else ""
        raise GoldenSetError(f"{corpus}: links lead out of the corpus{more}, and it is never read beyond it: {links}")
    files = tuple(p.relative_to(corpus).as_posix() for p in walked.files if readable_kind(p))
    if not files:
        raise GoldenSetError(f"{corpus}: no corpus files ({', '.join(sorted(SUFFIXES))})")

    raw = data.get("question")
    if not isinstance(raw, list) or not raw:
        raise GoldenSetError(f"{source}: no questions: add [[question]] tables with question and expected")
    resolve = _resolver(files, corpus)
    questions: list[GoldenQuestion] = []
    seen: dict[str, int] = {}
    for number, entry in enumerate(raw, start=1):
        questions.append(_question(entry, number, source, resolve))
        qid = questions[-1].id
        if qid in seen:
            raise GoldenSetError(f"{source}: question {number}: id {qid!r} is also question {seen[qid]}'s")
        seen[qid] = number
    return GoldenSet(
        name=name,
        description=description,
        source=source,
        corpus=corpus,
        floor_path=floor_path,
        questions=tuple(questions),
        files=files,
    )


def _text(data: dict[str, Any], key: str, source: Path, where: str) -> str:
    value = data.get(key, "")
    if not isinstance(value, str):
        raise GoldenSetError(f"{source}: {where}: {key} must be a string, not {type(value).__name__}")
    return value.strip()


def _resolver(files: tuple[str, ...], corpus: Path) -> Callable[[str], str]:
    exact = set(files)
    by_stem: dict[str, list[str]] = {}
    for name in files:
        by_stem.setdefault(Path(name).with_suffix("").as_posix(), []).append(name)

    def resolve(expected: str) -> str:
        wanted = expected.strip().removeprefix("./")
        if wanted in exact:
            return wanted
        candidates = by_stem.get(wanted, [])
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            raise ValueError(f"{expected!r} could be any of {', '.join(candidates)}: name it with its suffix")
        raise ValueError(f"{expected!r} is not a file of the corpus {corpus}")

    return resolve


def _question(entry: Any, number: int, source: Path, resolve: Callable[[str], str]) -> GoldenQuestion:
    where = f"question {number}"
    if not isinstance(entry, dict):
        raise GoldenSetError(f"{source}: {where}: must be a [[question]] table")
    unknown = sorted(set(entry) - _QUESTION_KEYS - _NOTE_KEYS)
    if unknown:
        known = ", ".join(sorted(_QUESTION_KEYS | _NOTE_KEYS))
        raise GoldenSetError(f"{source}: {where}: unknown key(s) {', '.join(unknown)} (known: {known})")
    qid = _text(entry, "id", source, where) or f"q{number}"
    where = f"question {number} ({qid})" if "id" in entry else where
    text = _text(entry, "question", source, where)
    if not text:
        raise GoldenSetError(f"{source}: {where}: question is missing or empty")
    kind = _text(entry, "kind", source, where) or DEFAULT_KIND
    expected = entry.get("expected")
    if isinstance(expected, str):
        expected = [expected]
    if not isinstance(expected, list) or not expected or not all(isinstance(e, str) and e.strip() for e in expected):
        raise GoldenSetError(f"{source}: {where}: expected must name at least one corpus file (a string or a list)")
    try:
        paths = tuple(dict.fromkeys(resolve(e) for e in expected))
    except ValueError as exc:
        raise GoldenSetError(f"{source}: {where}: expected {exc}") from None
    return GoldenQuestion(id=qid, kind=kind, text=text, expected=paths)
