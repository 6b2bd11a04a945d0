"""Check the pgdocs question set against a generated corpus.

Every question must be well formed, every expected page must exist in the corpus, and the
`evidence` sentence must occur on the first (best) expected page, compared with whitespace
collapsed and case folded. Prints the counts per kind and per area; exits 1 on any problem.

    .venv/bin/python -m bench.golden.check_questions [--questions FILE] [--corpus DIR]
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_QUESTIONS = HERE / "pgdocs.toml"
DEFAULT_CORPUS = Path("var/golden/pgdocs")
KINDS = ("natural", "identifier")
MAX_EXPECTED = 3


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    area: str
    question: str
    expected: tuple[str, ...]
    evidence: str


def normalise(text: str) -> str:
    """Whitespace collapsed to single spaces, case folded: the form evidence is matched in."""
    return " ".join(text.split()).casefold()


def load_questions(path: Path) -> tuple[list[Question], list[str]]:
    """The questions of a set file, and the problems found in its shape."""
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    problems: list[str] = []
    questions: list[Question] = []
    seen: set[str] = set()
    for index, raw in enumerate(data.get("question", []), 1):
        where = f"question #{index} ({raw.get('id', '?')})"
        qid = raw.get("id")
        kind = raw.get("kind")
        text = raw.get("question")
        expected = raw.get("expected")
        evidence = raw.get("evidence")
        if not isinstance(qid, str) or not qid:
            problems.append(f"{where}: missing id")
            continue
        if qid in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(qid)
        if kind not in KINDS:
            problems.append(f"{where}: kind must be one of {KINDS}, not {kind!r}")
        if not isinstance(text, str) or not text.strip():
            problems.append(f"{where}: empty question")
        if (
            not isinstance(expected, list)
            or not 1 <= len(expected) <= MAX_EXPECTED
            or not all(isinstance(stem, str) and stem for stem in expected)
        ):
            problems.append(f"{where}: expected must list 1 to {MAX_EXPECTED} page stems")
            continue
        if len(set(expected)) != len(expected):
            problems.append(f"{where}: an expected page is listed twice")
        if not isinstance(evidence, str) or not evidence.strip():
            problems.append(f"{where}: empty evidence")
            continue
        questions.append(
            Question(
                id=qid,
                kind=str(kind),
                area=str(raw.get("area", "")),
                question=str(text),
                expected=tuple(expected),
                evidence=evidence,
            )
        )
    texts = Counter(normalise(q.question) for q in questions)
    problems.extend(f"question asked twice: {text!r}" for text, count in texts.items() if count > 1)
    return questions, problems


def check_corpus(questions: list[Question], corpus: Path) -> list[str]:
    """Problems with expected pages and evidence against the generated corpus."""
    problems: list[str] = []
    cache: dict[str, str] = {}
    for q in questions:
        for stem in q.expected:
            page = corpus / f"{stem}.txt"
            if not page.is_file():
                problems.append(f"{q.id}: expected page {stem!r} is not in the corpus")
        best = q.expected[0]
        if best not in cache:
            page = corpus / f"{best}.txt"
            cache[best] = normalise(page.read_text(encoding="utf-8")) if page.is_file() else ""
        if cache[best] and normalise(q.evidence) not in cache[best]:
            problems.append(f"{q.id}: evidence not found on {best!r}: {q.evidence!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS, help="the set (TOML)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help=f"default {DEFAULT_CORPUS}")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(
            f"no corpus at {args.corpus}: run `python -m bench.golden.pgdocs_corpus {args.corpus}` first",
            file=sys.stderr,
        )
        return 1
    try:
        questions, problems = load_questions(args.questions)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        print(f"PROBLEM cannot read {args.questions}: {exc}")
        return 1
    problems += check_corpus(questions, args.corpus)
    pages = len(list(args.corpus.glob("*.txt")))
    kinds = Counter(q.kind for q in questions)
    areas = Counter(q.area or "(none)" for q in questions)
    dashed = sum(1 for q in questions if q.kind == "identifier" and " -" in f" {q.question}")
    distinct = len({stem for q in questions for stem in q.expected})
    print(f"{len(questions)} questions against {pages} pages in {args.corpus}")
    for kind in KINDS:
        print(f"  {kind:<11} {kinds.get(kind, 0)}")
    print(f"  identifier questions with a -/-- option: {dashed}")
    print(f"  distinct expected pages: {distinct}")
    print("  areas: " + ", ".join(f"{area} {count}" for area, count in sorted(areas.items())))
    for problem in problems:
        print(f"PROBLEM {problem}")
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print(f"ok: all {len(questions)} evidence strings found on their first expected page")
    return 0


if __name__ == "__main__":
    sys.exit(main())
