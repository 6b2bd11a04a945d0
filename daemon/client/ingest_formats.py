"""Files as `recalld ingest` reads them: the text and title of HTML and PDF files, the title of a
text file by its markup, and a binary file told apart from text.

HTML is read with the standard library's parser (what Beautiful Soup itself uses by default):
text and a title need no more. PDF needs `pypdf`, the optional `pdf` extra
(`pip install 'recalld[pdf]'`); without it a PDF is skipped and the reason says how to get it.
A file that cannot be read gives `Unreadable` with why, which ingest lists as skipped.
"""

from __future__ import annotations

import codecs
import io
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

HTML_SUFFIXES = frozenset({".html", ".htm"})
PDF_SUFFIXES = frozenset({".pdf"})
SUFFIXES = HTML_SUFFIXES | PDF_SUFFIXES
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
RST_SUFFIXES = frozenset({".rst"})

PDF_EXTRA = "PDF needs the pdf extra (pypdf): pip install 'recalld[pdf]'"

# Where a page declares its encoding: <meta charset="..."> or the http-equiv form's content.
# HTML5 has the declaration within the first 1024 bytes; a little more is looked at.
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_PRESCAN_BYTES = 2048

_HIDDEN = frozenset({"script", "style", "noscript", "template", "head", "svg", "iframe"})
_BLOCKS = frozenset(
    {
        "p", "div", "br", "li", "ul", "ol", "table", "tr", "section", "article", "header", "footer",
        "nav", "aside", "main", "blockquote", "pre", "dl", "dt", "dd", "figure", "figcaption", "hr",
        "h1", "h2", "h3", "h4", "h5", "h6", "title", "body", "html", "form", "fieldset", "address",
    }
)  # fmt: skip
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_SPACES = re.compile(r"\s+")


class Unreadable(Exception):
    """A file ingest skips, with why (the message)."""


@dataclass(frozen=True)
class Document:
    title: str | None
    """From the file itself (HTML's <title> or first heading, the PDF's metadata); None: none."""
    text: str


def kind_of(path: Path) -> str | None:
    """'html', 'pdf', or None for a file of neither kind."""
    suffix = path.suffix.lower()
    return "html" if suffix in HTML_SUFFIXES else "pdf" if suffix in PDF_SUFFIXES else None


def read(path: Path, data: bytes) -> Document:
    if kind_of(path) == "pdf":
        return read_pdf(data)
    return read_html(data)


# -- HTML


def html_encoding(data: bytes) -> str | None:
    """The encoding a page declares: its byte-order mark, else its <meta> charset; None when it
    declares none. An unknown name is Unreadable (decoding under a guess would garble it)."""
    for bom, name in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16")):
        if data.startswith(bom):
            return name
    found = _CHARSET.search(data[:_PRESCAN_BYTES])
    if found is None:
        return None
    name = found.group(1).decode("ascii")
    try:
        codec = codecs.lookup(name).name
    except LookupError:
        raise Unreadable(f"declares an unknown encoding {name!r}") from None
    # HTML maps the Latin-1 label to windows-1252 (browsers do); UTF-16 in an ASCII <meta> is UTF-8.
    return {"latin-1": "cp1252", "iso8859-1": "cp1252", "utf-16": "utf-8"}.get(codec, codec)


def decode_html(data: bytes) -> str:
    """The page's text under its declared encoding; undeclared: UTF-8, else windows-1252, the
    web's legacy default (what browsers assume too)."""
    declared = html_encoding(data)
    if declared is not None:
        try:
            return data.decode(declared)
        except UnicodeDecodeError as exc:
            raise Unreadable(
                f"not valid {declared} as it declares (byte 0x{data[exc.start : exc.start + 1].hex()} "
                f"at offset {exc.start})"
            ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


class _Text(HTMLParser):
    """The visible text, blocks on lines of their own, headings as markdown headings (the
    chunker splits on them); the <title> and first heading kept aside."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title: list[str] | None = None
        self.heading: list[str] | None = None
        self.first_heading = ""
        self._hidden = 0
        self._in_title = False
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and self.title is None:
            self._in_title, self.title = True, []
        elif tag in _HIDDEN:
            self._hidden += 1
        elif tag == "pre":
            self._pre += 1
        if tag in _BLOCKS:
            self.parts.append("\n")
        if tag in _HEADINGS and not self._hidden:
            self.parts.append("#" * _HEADINGS[tag] + " ")
            if not self.first_heading and self.heading is None:
                self.heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _HIDDEN and self._hidden:
            self._hidden -= 1
        elif tag == "pre" and self._pre:
            self._pre -= 1
        if tag in _HEADINGS and self.heading is not None:
            self.first_heading, self.heading = _squeeze("".join(self.heading)), None
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title and self.title is not None:
            self.title.append(data)
        elif not self._hidden:
            # a line break in running text is a space; only blocks (and <pre>) break lines
            self.parts.append(data if self._pre else _SPACES.sub(" ", data))
            if self.heading is not None:
                self.heading.append(data)


def _squeeze(text: str) -> str:
    return " ".join(text.split())


def read_html(data: bytes) -> Document:
    parser = _Text()
    parser.feed(decode_html(data).replace("\x00", ""))
    parser.close()
    lines = [_squeeze(line) for line in "".join(parser.parts).splitlines()]
    text = "\n\n".join(line for line in lines if line)
    title = _squeeze("".join(parser.title or [])) or parser.first_heading
    return Document(title[:300] or None, text)


# -- PDF


def read_pdf(data: bytes) -> Document:
    try:
        import pypdf
        from pypdf.errors import PyPdfError
    except ImportError:
        raise Unreadable(PDF_EXTRA) from None
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise Unreadable("an encrypted PDF (a password is needed to read it)")
        pages = [page.extract_text() or "" for page in reader.pages]
        metadata = reader.metadata
    except Unreadable:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError) as exc:  # a damaged file
        raise Unreadable(f"not a readable PDF ({type(exc).__name__}: {str(exc)[:120]})") from None
    text = "\n\n".join(page.strip() for page in pages if page.strip()).replace("\x00", "")
    if not text:
        raise Unreadable("a PDF with no text layer (scanned pages?): run OCR on it first")
    title = _squeeze(str(metadata.title or "")) if metadata is not None else ""
    return Document(title[:300] or None, text)


# -- text files: the title their markup gives them

TITLE_LINES = 100
"""How far into a text file its title is looked for."""
TITLE_CHARS = 300

_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
"""A Markdown ATX heading: 1 to 6 #s, then a space or the line's end (`#include` is no heading);
a closing run of #s is not part of it."""
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SETEXT_MARKDOWN = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_RST_ADORNMENT = re.compile(r"""^([!-/:-@\[-`{-~])\1{2,}$""")
"""A line of one punctuation character repeated (3 or more): reStructuredText's section adornment."""
_PLAIN_UNDERLINE = re.compile(r"^(=|-)\1{2,}$")


def text_title(path: Path, text: str) -> str | None:
    """The title a text file gives itself by its markup; None when it gives none.

    Only Markdown (`.md`, `.markdown`) has `#` headings: its first ATX heading or setext heading,
    never a line in a code fence. A reStructuredText file (`.rst`) is titled by its document
    title, the first section title (underlined, or over- and underlined, by one punctuation
    character at least as long as the title). In plain text a `#` line is text (`#undef` in a
    README); a first line underlined with `=` or `-` as long as it, after nothing but blank lines,
    is the title (the convention of many READMEs).
    """
    suffix = path.suffix.lower()
    lines = text.splitlines()[:TITLE_LINES]
    if suffix in MARKDOWN_SUFFIXES:
        found = _markdown_title(lines)
    elif suffix in RST_SUFFIXES:
        found = _rst_title(lines)
    else:
        found = _plain_title(lines)
    return found[:TITLE_CHARS] if found else None


def _markdown_title(lines: list[str]) -> str | None:
    fence: str | None = None
    start = 0
    if lines and lines[0].strip() == "---":  # front matter (YAML) is no heading
        start = next((i + 1 for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), 0)
    previous = ""
    for line in lines[start:]:
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1) == fence:
                fence = None
            continue
        if opened:
            fence, previous = opened.group(1), ""
            continue
        atx = _ATX.match(line)
        if atx and (atx.group(2) or "").strip():
            return _squeeze(atx.group(2))
        if previous and _SETEXT_MARKDOWN.match(line) and not line.startswith("    "):
            return previous
        # a setext heading's text: a paragraph line (not indented code, not a list item or quote)
        plain = line.strip()
        indented = line.startswith(("    ", "\t"))
        previous = "" if not plain or indented or plain.startswith(("-", "*", "+", ">")) else _squeeze(plain)
    return None


def _rst_title(lines: list[str]) -> str | None:
    for i in range(len(lines) - 1):
        title, under = lines[i], lines[i + 1].rstrip()
        if not title.strip() or _RST_ADORNMENT.match(title.strip()) or not _RST_ADORNMENT.match(under):
            continue
        over = lines[i - 1].rstrip() if i > 0 else ""
        if over == under:  # over- and underlined: the title may be inset
            return _squeeze(title)
        if not title[0].isspace() and len(under) >= len(title.rstrip()):
            return _squeeze(title)
    return None


def _plain_title(lines: list[str]) -> str | None:
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None or first + 1 >= len(lines):
        return None
    title, under = lines[first].strip(), lines[first + 1].strip()
    if _PLAIN_UNDERLINE.match(under) and len(under) >= len(title) and not _PLAIN_UNDERLINE.match(title):
        return _squeeze(title)
    return None


# -- binary files

_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed; to read it, decompress it first: gunzip -k {name}"),
    (b"BZh", "bzip2-compressed; to read it, decompress it first: bunzip2 -k {name}"),
    (b"\xfd7zXZ\x00", "xz-compressed; to read it, decompress it first: unxz -k {name}"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed; to read it, decompress it first: unzstd {name}"),
    (b"\x7fELF", "an ELF executable or library"),
    (b"PK\x03\x04", "a zip archive"),
)
_BINARY_PROBE = 8192
"""Bytes looked at for a NUL, as git and grep do to tell binary from text."""


def binary_kind(data: bytes, name: str = "FILE") -> str | None:
    """Why `data` is a binary file ('binary file (what it is)'), or None for text, whatever its
    encoding. A known signature names the kind (and how to get text out of a compressed file
    `name`);
    otherwise a NUL byte early on marks it, unless a UTF-16 or UTF-32 byte-order mark says the
    NULs are text."""
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            # "BZh" opens ordinary text too ("BZh is..."): bzip2 goes on with a block size digit
            if magic == b"BZh" and not data[3:4].isdigit():
                continue
            return f"binary file ({kind.format(name=name)})"
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return None
    if b"\x00" in data[:_BINARY_PROBE]:
        return "binary file (it holds NUL bytes: not text)"
    return None
