"""What `recalld ingest` reads out of files (daemon/client/ingest_formats.py, daemon/client/ingest.py): HTML's and
PDF's text, title and encoding, a text file's title by its markup, a binary file told apart, and
why a file it cannot read is skipped."""

from __future__ import annotations

import gzip
import io
import sys
from pathlib import Path

import pytest
from pypdf import PdfWriter

from recalld.client.ingest import title_of
from recalld.client.ingest_formats import PDF_EXTRA, Unreadable, binary_kind, read_html, read_pdf
from tests.support.pdf import pdf_bytes

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>  Pump
 guide </title><style>body { color: red }</style><script>var hidden = 1;</script></head>
<body><nav>Home</nav><h1>Maintenance</h1><p>Grease the bearings&nbsp;monthly &amp; check
the seals.</p><ul><li>one</li><li>two</li></ul><h2>Caf&eacute;</h2><p>Done.</p></body></html>
"""


def test_html_text_keeps_blocks_and_headings_and_drops_what_is_not_shown() -> None:
    """Spaces, no-break ones too, are folded: the text is for search, not for layout."""
    document = read_html(PAGE.encode())
    assert document.title == "Pump guide"
    assert document.text == (
        "Home\n\n# Maintenance\n\nGrease the bearings monthly & check the seals.\n\none\n\ntwo\n\n## Café\n\nDone."
    )
    assert "hidden" not in document.text and "color" not in document.text


@pytest.mark.parametrize(
    ("html", "title"),
    [
        ("<title>Named</title><h1>Heading</h1>", "Named"),
        ("<body><h2>First <b>heading</b></h2><h1>Later</h1></body>", "First heading"),
        ("<title>   </title><h3>Blank title: the heading</h3>", "Blank title: the heading"),
        ("<p>no title at all</p>", None),
        ("<svg><title>icon</title></svg><p>text</p>", "icon"),  # as browsers do with a lone <title>
    ],
)
def test_html_title_is_the_title_else_the_first_heading(html: str, title: str | None) -> None:
    assert read_html(html.encode()).title == title


@pytest.mark.parametrize(
    ("data", "text"),
    [
        ('<meta charset="iso-8859-1"><p>Caf\xe9</p>'.encode("latin-1"), "Café"),
        (
            b'<meta http-equiv="Content-Type" content="text/html; charset=windows-1252"><p>\x93q\x94</p>',
            "\u201cq\u201d",
        ),
        ('<meta charset="koi8-r"><p>Привет</p>'.encode("koi8-r"), "Привет"),
        ("\ufeff<p>Café</p>".encode(), "Café"),  # a UTF-8 byte-order mark
        ("<p>Café</p>".encode("utf-16"), "Café"),  # a UTF-16 one
        ("<p>Café</p>".encode(), "Café"),  # undeclared UTF-8
        ("<p>Caf\xe9</p>".encode("latin-1"), "Café"),  # undeclared, not UTF-8: the web's windows-1252
        ('<meta charset="utf-16"><p>Café</p>'.encode(), "Café"),  # UTF-16 named in ASCII bytes: UTF-8
    ],
)
def test_html_encoding_is_the_declared_one_else_utf8_else_windows_1252(data: bytes, text: str) -> None:
    assert read_html(data).text == text


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b'<meta charset="no-such-code"><p>x</p>', "declares an unknown encoding 'no-such-code'"),
        (b'<meta charset="utf-8"><p>Caf\xe9</p>', "not valid utf-8 as it declares (byte 0xe9 at offset"),
    ],
)
def test_html_that_cannot_be_decoded_as_it_says_is_unreadable(data: bytes, why: str) -> None:
    with pytest.raises(Unreadable, match=why.replace("(", r"\(")):
        read_html(data)


def test_pdf_text_of_every_page_and_the_metadata_title() -> None:
    data = pdf_bytes([["Pump maintenance", "Grease the bearings (monthly)."], ["Second page"]], title="Pump guide")
    document = read_pdf(data)
    assert document.title == "Pump guide"
    assert document.text == "Pump maintenance\nGrease the bearings (monthly).\n\nSecond page"
    assert read_pdf(pdf_bytes([["untitled"]])).title is None


def _encrypted() -> bytes:
    writer = PdfWriter(clone_from=io.BytesIO(pdf_bytes([["secret"]])))
    writer.encrypt("password")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"%PDF-1.4\nnot really a pdf", "not a readable PDF"),
        (b"", "not a readable PDF"),
        (pdf_bytes([[], []]), "no text layer"),
        (_encrypted(), "encrypted PDF"),
    ],
)
def test_a_pdf_that_cannot_be_read_is_unreadable_with_why(data: bytes, why: str) -> None:
    with pytest.raises(Unreadable, match=why):
        read_pdf(data)


def test_without_the_pdf_extra_a_pdf_is_unreadable_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules is how Python spells "not installed": the import raises ImportError
    monkeypatch.setitem(sys.modules, "pypdf", None)
    with pytest.raises(Unreadable) as raised:
        read_pdf(pdf_bytes([["text"]]))
    assert str(raised.value) == PDF_EXTRA and "recalld[pdf]" in PDF_EXTRA


def test_html_pre_keeps_its_lines() -> None:
    assert read_html(b"<p>a\nb</p><pre>line one\n  line two</pre>").text == "a b\n\nline one\n\nline two"


# -- text files: the title a person would give them, and binary files told apart

GNU_PATCH_README = """This is GNU patch, which applies diff files to original files.

This version of patch has many changes made by the Free Software Foundation.

To build, edit config.h and change the
#undef statements in it to #define as appropriate for your system,
then run make.
"""

RST_WITH_OVERLINE = """.. comment: the licence is elsewhere

==================
  The Pump Guide
==================

Maintenance
-----------

Grease the bearings.
"""


@pytest.mark.parametrize(
    ("name", "text", "title"),
    [
        # Markdown: an ATX heading (a space after the #s), else a setext one, never in a code fence
        ("guide.md", "intro text\n\n# Grease the pump #\n\nbody", "Grease the pump"),
        ("guide.markdown", "## Second level first\n# Then first", "Second level first"),
        ("notes.md", "#include <stdio.h>\n\nNot a heading: no space after the #.\n", "notes"),
        ("setext.md", "Pump Guide\n==========\n\ntext\n", "Pump Guide"),
        ("fenced.md", "```sh\n# a shell comment\n```\n\n# The real heading\n", "The real heading"),
        ("front.md", "---\nlayout: page\n---\n\n# After the front matter\n", "After the front matter"),
        # reStructuredText: the document title, its first section title, over- and underlined or underlined
        ("guide.rst", RST_WITH_OVERLINE, "The Pump Guide"),
        ("install.rst", "Installing\n==========\n\n# not a heading\n", "Installing"),
        ("plain.rst", "Just a paragraph.\n\n#. an enumerated item\n", "plain"),
        ("short.rst", "A long title here\n===\n\ntext\n", "short"),  # an underline shorter than its title
        # plain text: a # line is text (GNU patch's README); an underlined first line is a title
        ("README", GNU_PATCH_README, "README"),
        ("notes.txt", "# not a heading in plain text\n\nmore\n", "notes"),
        ("README.Debian", "adduser in Debian\n=================\n\ntext\n", "adduser in Debian"),
        (
            "README.amd64",
            "               The Debian GNU Compiler Collection setup\n"
            "               ========================================\n",
            "The Debian GNU Compiler Collection setup",
        ),
        ("changes.text", "one line\nthen a divider\n---------------\n", "changes"),  # a divider, not a title
        ("my_file-name.txt", "no title\n", "my file name"),
    ],
)
def test_a_text_files_title_follows_its_markup(name: str, text: str, title: str) -> None:
    assert title_of(Path("/corpus") / name, text) == title


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (gzip.compress(b"a changelog\n"), "binary file (gzip-compressed"),
        (b"\x7fELF\x02\x01\x01\x00" + bytes(56), "binary file (an ELF executable or library)"),
        (b"BZh91AY&SY" + bytes(8), "binary file (bzip2-compressed"),
        (b"\xfd7zXZ\x00\x00", "binary file (xz-compressed"),
        (b"\x89PNG\r\n\x1a\n" + bytes(8), "binary file"),
        (b"text then a NUL \x00 byte", "binary file"),
    ],
    ids=["gzip", "elf", "bzip2", "xz", "png", "nul"],
)
def test_a_binary_file_is_named_binary_with_its_kind(data: bytes, why: str) -> None:
    found = binary_kind(data)
    assert found is not None and found.startswith(why), found


@pytest.mark.parametrize(
    "data",
    [b"plain text\n", "caf\xe9".encode("latin-1"), "Café\n".encode(), b"", "\ufeff# BOM".encode(), b"BZh is text"],
    ids=["ascii", "latin1", "utf8", "empty", "utf8-bom", "bzh-text"],
)
def test_text_is_not_binary_whatever_its_encoding(data: bytes) -> None:
    assert binary_kind(data) is None
