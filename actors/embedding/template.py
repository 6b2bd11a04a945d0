"""Versioned input templates: how a record's title and chunk, or a query, become model input.

The template version is part of the vector space identity: changing how inputs are rendered
changes every vector, so a new rendering is a new version, never an edit of an old one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from enum import StrEnum


class InputKind(StrEnum):
    DOCUMENT = "document"
    """A record's title with one chunk of its body (what the index stores)."""
    QUERY = "query"
    """A recall question."""
    TITLE = "title"
    """A title alone (semantic duplicate checks compare titles only)."""


@dataclass(frozen=True, slots=True)
class Template:
    version: int
    document: str
    query: str
    title: str


# v1: all-MiniLM-L6-v2 is a symmetric model, so queries and titles go in as they are.
# v2: the title as a label on the same line, for corpora whose chunks read as continuations
#     of their heading (man pages, reference docs); queries are unchanged, so a v1 generation
#     keeps answering v2 queries while the v2 generation is built.
TEMPLATES: dict[int, Template] = {
    1: Template(version=1, document="{title}\n\n{chunk}", query="{query}", title="{title}"),
    2: Template(version=2, document="{title}: {chunk}", query="{query}", title="{title}"),
}
LATEST_VERSION = max(TEMPLATES)


class UnknownTemplateVersion(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RenderedInput:
    text: str
    template_version: int
    kind: InputKind

    def fingerprint(self) -> str:
        """What a log line may say about this input (never the text)."""
        return fingerprint(self.text)


def template(version: int) -> Template:
    try:
        return TEMPLATES[version]
    except KeyError:
        raise UnknownTemplateVersion(
            f"input template version {version} is unknown (known: {sorted(TEMPLATES)})"
        ) from None


def render_document(title: str, chunk: str, *, version: int) -> RenderedInput:
    """Model input for one chunk of a record. Surrounding whitespace is not meaning, so it is
    stripped; a record without a title is its chunk alone (no leading blank lines)."""
    tpl = template(version)
    title, chunk = title.strip(), chunk.strip()
    text = tpl.document.format(title=title, chunk=chunk) if title else chunk
    return RenderedInput(text=text, template_version=tpl.version, kind=InputKind.DOCUMENT)


def render_query(query: str, *, version: int) -> RenderedInput:
    tpl = template(version)
    return RenderedInput(text=tpl.query.format(query=query.strip()), template_version=tpl.version, kind=InputKind.QUERY)


def render_title(title: str, *, version: int) -> RenderedInput:
    tpl = template(version)
    return RenderedInput(text=tpl.title.format(title=title.strip()), template_version=tpl.version, kind=InputKind.TITLE)


def render(kind: InputKind, *, version: int, title: str = "", text: str = "") -> RenderedInput:
    """One entry point for all kinds: `text` is the chunk (document) or the question (query)."""
    if kind is InputKind.DOCUMENT:
        return render_document(title, text, version=version)
    if kind is InputKind.QUERY:
        return render_query(text, version=version)
    return render_title(title, version=version)


def fingerprint(text: str) -> str:
    """`sha256:<12 hex>/<n>ch`: enough to correlate log lines, nothing of the content."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return f"sha256:{digest}/{len(text)}ch"
