"""Pure rules about records: what makes two titles the same, and what a revision's content is."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Mapping
from typing import Any


def normalise_title(title: str) -> str:
    """Fold case, whitespace and punctuation so that exact duplicates compare equal.

    "  Rotate the SIGNING keys, every ninety days! " and "rotate the signing keys every ninety
    days" normalise alike. Letters and digits of every script are kept; everything else
    (punctuation, symbols, separators) becomes a single space. A title with no letter or digit
    at all ("!!!", "???") keeps its symbols, only case and whitespace folded: otherwise every such
    title would be a duplicate of every other.
    """
    folded = unicodedata.normalize("NFKC", title).casefold()
    kept = [ch if unicodedata.category(ch)[0] in "LN" else " " for ch in folded]
    return " ".join("".join(kept).split()) or " ".join(folded.split())


def content_hash(*, kind: str, title: str, body: str, attributes: Mapping[str, Any], source_path: str | None) -> str:
    """SHA-256 over everything a revision stores, so an unchanged write is recognisable."""
    canonical = json.dumps(
        [kind, title, body, attributes, source_path],
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def query_hash(namespace: str, query: str) -> str:
    """What telemetry keeps of a query: never the text, only a stable hash of it."""
    return hashlib.sha256(f"{namespace}\x00{query}".encode()).hexdigest()[:32]
