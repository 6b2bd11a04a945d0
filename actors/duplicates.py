"""Pure rules of the semantic duplicate check (SPEC §5): what a title is compared as, which
scores warn, and how the similar records are ordered. No I/O.

The I/O around them (embedding the new title, reading the titles of a namespace and kind, the
time cap) is `daemon/duplicates.py`; the title vectors are kept by the index manager
(`actors/index/titles.py`).
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

from actors.records import normalise_title

SCORE_DIGITS = 6
"""Scores are reported, and compared with the threshold, rounded to this many decimals: the
vectors are float32, whose dot products differ in the last bits with the order of the sums, so
"equal to the threshold" means equal as the client reads the score."""


def title_text(title: str) -> str:
    """What the model embeds for a title: its normalised form (case, whitespace and punctuation
    folded, as for exact duplicates), so that titles that differ only in those share a vector."""
    return normalise_title(title)


def title_key(title_norm: str) -> str:
    """The key of a normalised title's stored vector: its SHA-256 (hex), never the text."""
    return hashlib.sha256(title_norm.encode("utf-8")).hexdigest()


def reported(score: float) -> float:
    return round(float(score), SCORE_DIGITS)


def warns(score: float, threshold: float) -> bool:
    """Inclusive: a score equal to the threshold (as reported) warns."""
    return reported(score) >= threshold


@dataclass(frozen=True, slots=True)
class Similar:
    id: uuid.UUID
    score: float


def most_similar(scored: list[tuple[uuid.UUID, float]], threshold: float, limit: int) -> list[Similar]:
    """The records whose score warns, the most similar first (ties by id, so the order is
    stable), at most `limit`."""
    hits = [Similar(record_id, reported(score)) for record_id, score in scored if warns(score, threshold)]
    hits.sort(key=lambda s: (-s.score, str(s.id)))
    return hits[:limit]
