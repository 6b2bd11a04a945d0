"""Turn the PostgreSQL 15 HTML documentation into one plain-text document per page.

The corpus of the `pgdocs` golden set. Source: the Debian package `postgresql-doc-15`
(`apt-get install postgresql-doc-15`), HTML under /usr/share/doc/postgresql-doc-15/html/.

Each page `NAME.html` becomes `NAME.txt`: the first line is the page title (from <title>,
falling back to the first h1/h2), then a blank line, then the readable text with paragraph
breaks kept. The navigation header and footer of every page are dropped; code, option names
(`--section=pre-data`), program listings and table rows are kept verbatim. Standard library only
(html.parser), so the output depends on nothing but the package version.

    .venv/bin/python -m bench.golden.pgdocs_corpus [OUT_DIR] [--source DIR] [--pages GLOB ...] [--limit N]
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from html.parser import HTMLParser
from pathlib import Path

DEFAULT_SOURCE = Path("/usr/share/doc/postgresql-doc-15/html")
DEFAULT_OUT = Path("var/golden/pgdocs")

# Pages that are navigation rather than documentation: the alphabetical back-of-book index
# (bookindex.html, 440 kB of links to every other page) would match any query.
EXCLUDED_STEMS = frozenset({"bookindex"})

# Elements whose start and end break the text into paragraphs.
BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "dl",
        "dt",
        "dd",
        "ul",
        "ol",
        "li",
        "table",
        "thead",
        "tbody",
        "tfoot",
        "caption",
        "blockquote",
        "hr",
        "section",
        "header",
        "footer",
        "body",
    }
)
# Elements whose text is never part of the document.
SKIP_TAGS = frozenset({"script", "style", "head"})
# Navigation blocks (DocBook XSL output): dropped with everything inside them.
NAV_CLASSES = frozenset({"navheader", "navfooter"})
HEADING_TAGS = frozenset({"h1", "h2"})
# Marks a <br> inside a paragraph (source newlines are ordinary whitespace).
_BREAK = "\x00"
VOID_TAGS = frozenset({"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr"})


class _PageText(HTMLParser):
    """Collects the title and the readable paragraphs of one DocBook-generated page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.heading = ""  # first h1/h2: the fallback title
        self.paragraphs: list[tuple[str, str]] = []  # (separator before it, text)
        self._stack: list[tuple[str, bool]] = []  # (tag, starts a skipped region)
        self._skip = 0  # depth of open skipped regions (nav blocks, head, script, style)
        self._in_title = False
        self._title_buf: list[str] = []
        self._heading_depth = 0
        self._heading_buf: list[str] = []
        self._pre = 0
        self._buf: list[str] = []
        self._row: list[str] | None = None  # cells of the table row being read
        self._cell: list[str] | None = None

    # -- text assembly

    def _flush(self, separator: str = "\n\n") -> None:
        """End the current paragraph; `separator` is what joins it to the previous one."""
        if self._pre:
            return
        raw = "".join(self._buf)
        self._buf = []
        lines = [" ".join(line.split()) for line in raw.split(_BREAK)]
        text = "\n".join(line for line in lines if line)
        if text:
            self.paragraphs.append((separator, text))

    def _text(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        else:
            self._buf.append(data)

    # -- parser callbacks

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = set((dict(attrs).get("class") or "").split())
        skipped = tag in SKIP_TAGS or (tag == "div" and bool(classes & NAV_CLASSES))
        if tag not in VOID_TAGS:
            self._stack.append((tag, skipped))
        if skipped:
            self._skip += 1
        if tag == "title":
            self._in_title = True
            return
        if self._skip:
            return
        if tag in HEADING_TAGS and not self.heading:
            self._heading_depth += 1
        if tag == "br":
            self._text("\n" if self._pre else _BREAK)
        elif tag == "pre":
            self._flush()
            self._pre += 1
        elif tag == "tr":
            self._flush()
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag in BLOCK_TAGS and self._cell is None and not self._pre:
            self._flush()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID_TAGS:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in VOID_TAGS:
            return
        # Pop up to the matching open tag (tolerates unclosed inner elements).
        skipped = False
        for index in range(len(self._stack) - 1, -1, -1):
            if self._stack[index][0] == tag:
                for _, was_skipped in self._stack[index:]:
                    if was_skipped:
                        self._skip -= 1
                        skipped = True
                del self._stack[index:]
                break
        if self._skip or skipped:
            return
        if tag in HEADING_TAGS and self._heading_depth:
            self._heading_depth -= 1
            if not self._heading_depth:
                self.heading = " ".join("".join(self._heading_buf).split())
        if tag == "pre" and self._pre:
            self._pre -= 1
            if not self._pre:
                self._end_pre()
        elif tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            cells = [cell for cell in self._row if cell]
            if cells:
                self.paragraphs.append(("\n", " | ".join(cells)))
            self._row = None
            self._cell = None
        elif tag in BLOCK_TAGS and self._cell is None and not self._pre:
            self._flush()

    def _end_pre(self) -> None:
        raw = "".join(self._buf)
        self._buf = []
        lines = [line.rstrip() for line in raw.replace("\xa0", " ").split("\n")]
        while lines and not lines[0].strip():
            lines.pop(0)
        while lines and not lines[-1].strip():
            lines.pop()
        if lines:
            self.paragraphs.append(("\n\n", "\n".join(lines)))

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_buf.append(data)
            return
        if self._skip:
            return
        if self._heading_depth:
            self._heading_buf.append(data)
        self._text(data if self._pre else data.replace("\xa0", " "))

    def close(self) -> None:
        super().close()
        self._flush()
        self.title = " ".join("".join(self._title_buf).split())


def page_text(html: str) -> tuple[str, str]:
    """(title, body) of one HTML page; the body has blank lines between paragraphs."""
    parser = _PageText()
    parser.feed(html)
    parser.close()
    title = parser.title or parser.heading
    parts: list[str] = []
    for separator, text in parser.paragraphs:
        if parts:
            parts.append(separator)
        parts.append(text)
    return title, "".join(parts)


def document(html: str) -> str:
    """The full `.txt` document of one page: title line, blank line, body."""
    title, body = page_text(html)
    return f"{title}\n\n{body}\n"


def select_pages(source: Path, patterns: list[str], limit: int | None) -> list[Path]:
    pages = sorted(path for path in source.glob("*.html") if path.stem not in EXCLUDED_STEMS)
    if patterns:
        pages = [path for path in pages if any(fnmatch.fnmatch(path.stem, pat) for pat in patterns)]
    if limit is not None:
        pages = pages[:limit]
    return pages


def build(source: Path, out: Path, patterns: list[str], limit: int | None) -> tuple[int, int]:
    """Write one `.txt` per selected page into `out`; returns (pages, bytes) written."""
    pages = select_pages(source, patterns, limit)
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for path in pages:
        data = document(path.read_text(encoding="utf-8")).encode("utf-8")
        (out / f"{path.stem}.txt").write_bytes(data)
        total += len(data)
    return len(pages), total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help=f"default {DEFAULT_SOURCE}")
    parser.add_argument(
        "--pages",
        action="append",
        default=[],
        metavar="GLOB",
        help="only pages whose stem matches (fnmatch, repeatable), e.g. 'sql-*'",
    )
    parser.add_argument("--limit", type=int, default=None, help="at most N pages (after --pages)")
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        print(
            f"no HTML documentation at {args.source}: apt-get install postgresql-doc-15",
            file=sys.stderr,
        )
        return 2
    pages, total = build(args.source, args.out, args.pages, args.limit)
    if not pages:
        print("no pages matched", file=sys.stderr)
        return 1
    print(f"wrote {pages} pages, {total} bytes to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
