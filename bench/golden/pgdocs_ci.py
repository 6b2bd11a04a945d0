"""Build the CI golden set `bench/golden/pgdocs-ci/` from the pgdocs set: the questions
whose best page is short, the pages they expect, and plausible distractors from the same parts
of the documentation, small enough to embed in a minute or two on 2 cores.

    .venv/bin/python -m bench.golden.pgdocs_corpus        # var/golden/pgdocs/ first
    .venv/bin/python -m bench.golden.pgdocs_ci            # -> bench/golden/pgdocs-ci/

Selection, by rule (no question or page is picked by hand, none by any system's answers):

- a question is kept when its first expected page is at most MAX_ANSWER_BYTES; its expected list
  keeps the pages of at most that size (the first always);
- distractors are the other pages of the same families (the name up to its first `-`:
  `sql-…`, `app-…`, `runtime-…`) of at most MAX_DISTRACTOR_BYTES, at most PER_FAMILY of each,
  evenly spaced in name order.

The pages are the PostgreSQL documentation under the PostgreSQL Licence (bench/golden/README.md);
the folder carries the licence notice.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tomllib
from pathlib import Path
from typing import cast

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
MAX_ANSWER_BYTES = 12_000
MAX_DISTRACTOR_BYTES = 6_000
PER_FAMILY = 4

LICENCE = """The files under corpus/ are pages of the PostgreSQL 15 documentation (Debian package
postgresql-doc-15), turned into plain text by bench/golden/pgdocs_corpus.py.

Portions Copyright (c) 1996-2026, The PostgreSQL Global Development Group
Portions Copyright (c) 1994, The Regents of the University of California

Permission to use, copy, modify, and distribute this software and its documentation for any
purpose, without fee, and without a written agreement is hereby granted, provided that the above
copyright notice and this paragraph and the following two paragraphs appear in all copies.

IN NO EVENT SHALL THE UNIVERSITY OF CALIFORNIA BE LIABLE TO ANY PARTY FOR DIRECT, INDIRECT,
SPECIAL, INCIDENTAL, OR CONSEQUENTIAL DAMAGES, INCLUDING LOST PROFITS, ARISING OUT OF THE USE OF
THIS SOFTWARE AND ITS DOCUMENTATION, EVEN IF THE UNIVERSITY OF CALIFORNIA HAS BEEN ADVISED OF THE
POSSIBILITY OF SUCH DAMAGE.

THE UNIVERSITY OF CALIFORNIA SPECIFICALLY DISCLAIMS ANY WARRANTIES, INCLUDING, BUT NOT LIMITED TO,
THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE. THE SOFTWARE
PROVIDED HEREUNDER IS ON AN "AS IS" BASIS, AND THE UNIVERSITY OF CALIFORNIA HAS NO OBLIGATIONS TO
PROVIDE MAINTENANCE, SUPPORT, UPDATES, ENHANCEMENTS, OR MODIFICATIONS.
"""


def family(stem: str) -> str:
    return stem.split("-", 1)[0]


def quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=REPO / "var/golden/pgdocs")
    parser.add_argument("--questions", type=Path, default=HERE / "pgdocs.toml")
    parser.add_argument("--out", type=Path, default=HERE / "pgdocs-ci")
    args = parser.parse_args(argv)

    def size(stem: str) -> int:
        return cast(int, (args.corpus / f"{stem}.txt").stat().st_size)  # args.corpus is Any

    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}: run `python -m bench.golden.pgdocs_corpus` first", file=sys.stderr)
        return 1
    source = tomllib.loads(args.questions.read_text())
    kept = []
    for q in source["question"]:
        if size(q["expected"][0]) <= MAX_ANSWER_BYTES:
            expected = [e for e in q["expected"] if size(e) <= MAX_ANSWER_BYTES]
            kept.append(q | {"expected": expected})
    answers = sorted({e for q in kept for e in q["expected"]})
    families = {family(stem) for stem in answers}
    pages = sorted(p.stem for p in args.corpus.glob("*.txt"))
    distractors: list[str] = []
    for name in sorted(families):
        pool = [p for p in pages if family(p) == name and p not in answers and size(p) <= MAX_DISTRACTOR_BYTES]
        step = max(1, len(pool) // PER_FAMILY)
        distractors += pool[::step][:PER_FAMILY]

    corpus = args.out / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    corpus.mkdir(parents=True)
    for stem in answers + distractors:
        shutil.copyfile(args.corpus / f"{stem}.txt", corpus / f"{stem}.txt")
    (args.out / "LICENCE").write_text(LICENCE)
    lines = [
        "# The CI golden set: a subset of bench/golden/pgdocs.toml, built by bench/golden/pgdocs_ci.py",
        "# (do not edit by hand; change the script or the source set and rebuild). Each question keeps",
        "# its id, kind and text; `expected` keeps the pages of the subset.",
        "",
        "corpus = "
        + quoted(f"the PostgreSQL 15 documentation: {len(answers)} answering pages and {len(distractors)} distractors"),
        "",
    ]
    for q in kept:
        lines += [
            "[[question]]",
            f"id = {quoted(q['id'])}",
            f"kind = {quoted(q['kind'])}",
            f"question = {quoted(q['question'])}",
            "expected = [" + ", ".join(quoted(e) for e in q["expected"]) + "]",
            "",
        ]
    (args.out / "questions.toml").write_text("\n".join(lines))
    total = sum(size(s) for s in answers + distractors)
    natural = sum(q["kind"] == "natural" for q in kept)
    print(
        f"{len(kept)} questions ({natural} natural, {len(kept) - natural} identifier), "
        f"{len(answers)} answering pages + {len(distractors)} distractors, {total:,} bytes -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
