"""Small real PDF files for the tests, written with pypdf (the `pdf` extra): pages of text in
Helvetica and, optionally, a title in the document's metadata."""

from __future__ import annotations

import io

from pypdf import PdfWriter
from pypdf.generic import ContentStream, DictionaryObject, NameObject


def _literal(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf_bytes(pages: list[list[str]], *, title: str | None = None) -> bytes:
    """A PDF of `pages`, each a list of lines (Latin-1 text); `title` into its metadata."""
    writer = PdfWriter()
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
        }
    )
    for lines in pages:
        page = writer.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
        ops = "".join(f"BT /F1 12 Tf 72 {720 - 20 * i} Td ({_literal(line)}) Tj ET\n" for i, line in enumerate(lines))
        stream = ContentStream(None, writer)
        stream.set_data(ops.encode("latin-1"))
        page.replace_contents(stream)
    if title is not None:
        writer.add_metadata({"/Title": title})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
