"""Render installed manual pages into one plain-text document per page.

The corpus of the `manpages` golden set: a second corpus, unlike the PostgreSQL documentation
the fusion defaults were chosen on, and of the kind the acceptance set of recall's fusion uses (real man
pages, questions in a user's words and option names typed as-is).

Pages come from sections 1, 5 and 8 under /usr/share/man (the 16,000 generated `gcloud` pages
left out: they would be most of the corpus). Every page named by the question file is kept,
and the others are sampled evenly from the sorted list up to `--pages` in all, so the same
machine gives the same corpus. Each page `NAME.SECTION.gz` becomes `NAME.SECTION.txt`
(questions name pages by that stem, e.g. `tar.1`): a first line `NAME(SECTION) - summary`
underlined with `=` (the title `recalld ingest` takes from plain text; a `#` line is a heading
only in Markdown), a blank line, then `man`'s own rendering at 100 columns, without hyphenation,
justification or overstrike.

    .venv/bin/python -m bench.golden.manpages_corpus [OUT_DIR] [--pages N] [--questions TOML]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DEFAULT_SOURCE = Path("/usr/share/man")
DEFAULT_OUT = Path("var/golden/manpages")
DEFAULT_QUESTIONS = Path(__file__).with_name("manpages.toml")
SECTIONS = ("man1", "man5", "man8")
SKIPPED_PREFIXES = ("gcloud",)

_OVERSTRIKE = re.compile(r".\x08")
_NAME_LINE = re.compile(r"^NAME\s*$", re.M)
_SEPARATOR = re.compile(r"\s+(?:-|\\-|—|–)\s+")


def stem_of(path: Path) -> str:
    """`tar.1.gz` -> `tar.1`."""
    return path.name.removesuffix(".gz")


def source_pages(source: Path) -> list[Path]:
    pages = [
        page
        for section in SECTIONS
        for page in (source / section).glob("*.gz")
        if not page.name.startswith(SKIPPED_PREFIXES)
    ]
    return sorted(pages, key=stem_of)


def choose(pages: list[Path], wanted: set[str], count: int) -> list[Path]:
    """Every wanted page, then pages evenly spaced over the rest, `count` in all."""
    kept = [p for p in pages if stem_of(p) in wanted]
    rest = [p for p in pages if stem_of(p) not in wanted]
    room = max(0, count - len(kept))
    if room and rest:
        step = len(rest) / room
        kept += [rest[int(i * step)] for i in range(min(room, len(rest)))]
    return sorted(kept, key=stem_of)


def render(page: Path) -> str:
    environment = {**os.environ, "MANWIDTH": "100", "GROFF_NO_SGR": "1", "LC_ALL": "C.UTF-8"}
    done = subprocess.run(
        ["man", "--no-hyphenation", "--no-justification", "-P", "cat", "-l", str(page)],
        capture_output=True,
        env=environment,
        check=False,
    )
    return _OVERSTRIKE.sub("", done.stdout.decode("utf-8", errors="replace")).strip()


def summary_of(text: str) -> str:
    """The NAME section's line, e.g. `tar - an archiving utility`."""
    found = _NAME_LINE.search(text)
    if found is None:
        return ""
    lines: list[str] = []
    for line in text[found.end() :].splitlines():
        if lines and not line.strip():
            break
        if line.strip():
            lines.append(line.strip())
    return " ".join(lines)


def document(page: Path, text: str) -> str:
    name, _, section = stem_of(page).rpartition(".")
    # `tar - an archiving utility`, `ssh_config — OpenSSH client configuration file`
    parts = _SEPARATOR.split(summary_of(text), maxsplit=1)
    summary = parts[1] if len(parts) == 2 else parts[0]
    title = f"{name}({section})" + (f" - {summary}" if summary else "")
    return f"{title}\n{'=' * len(title)}\n\n{text}\n"


def wanted_pages(questions: Path) -> set[str]:
    if not questions.exists():
        return set()
    with questions.open("rb") as handle:
        data = tomllib.load(handle)
    return {stem for q in data.get("question", []) for stem in q.get("expected", [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help=f"default {DEFAULT_SOURCE}")
    parser.add_argument("--pages", type=int, default=800, help="pages in all (default 800)")
    parser.add_argument("--questions", type=Path, default=DEFAULT_QUESTIONS, help="keep every page it names")
    args = parser.parse_args(argv)

    wanted = wanted_pages(args.questions)
    pages = choose(source_pages(args.source), wanted, args.pages)
    missing = wanted - {stem_of(p) for p in pages}
    if missing:
        print(f"pages named by the questions but not installed: {sorted(missing)}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.txt"):
        old.unlink()
    with ThreadPoolExecutor(max_workers=4) as pool:
        texts = list(pool.map(render, pages))
    written = 0
    for page, text in zip(pages, texts, strict=True):
        if text:
            (args.out / f"{stem_of(page)}.txt").write_text(document(page, text), encoding="utf-8")
            written += 1
    total = sum(p.stat().st_size for p in args.out.glob("*.txt"))
    print(f"wrote {written} pages, {total:,} bytes, to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
