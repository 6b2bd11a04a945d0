"""Pure rules of the semantic duplicate check (docs/DUPLICATES.md): what a title is compared as, which
scores warn, and how the similar records are ordered. No I/O.

The I/O around them (embedding the new title, reading the titles of a namespace and kind, the
time cap) is `daemon/services/duplicates.py`; the title vectors are kept by the index manager
(`actors/duplicates/catch_up.py`).
"""

from __future__ import annotations

import functools
import hashlib
import re
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from recalld.actors.duplicates.language import ROMANCE_PARTICLES, TITLE_CACHE_SIZE, across_languages, folded_words
from recalld.actors.records import normalise_title

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


def catch_up(unstored: Sequence[str], own: Collection[str], bound: int, room: int) -> tuple[list[str], bool]:
    """Which titles with no stored vector (`unstored`, normalised, oldest first) a check embeds
    with its `own` in its one embedding call: the newest first (a burst's twin was written a
    moment ago), each once, none of its own, at most `bound` (`[duplicates] catch_up_titles`)
    and `room` (what the provider call has left). With whether some were left waiting."""
    waiting = [norm for norm in dict.fromkeys(reversed(unstored)) if norm not in own]
    taken = waiting[: max(0, min(bound, room))]
    return taken, len(taken) < len(waiting)


@dataclass(frozen=True, slots=True)
class Similar:
    id: uuid.UUID
    score: float


@dataclass(frozen=True, slots=True)
class Contrast:
    """The lexical second stage: two titles that share their frame and differ only in a slot of
    at most `slot_words` content words ("Export the sales report to CSV" / "... to PDF", "Add
    dark mode to the mobile app" / "... to the web dashboard") name two neighbouring items, not
    one item twice, however close their vectors are: such a pair must score `penalty` higher to
    warn. The frame is the content words both share, at least `min_shared` of them and at least
    as many as the larger slot (the words one title has and the other lacks): a neighbour keeps
    most of its words and changes a few, while a paraphrase keeps a couple of key nouns and says
    the rest otherwise ("Users can export their invoices as PDF" / "Allow downloading invoices
    in PDF format": two shared, three differing), and a missed paraphrase is silent where a
    false alarm is only a warning. Chosen on the calibration pairs (docs/DUPLICATES.md); a
    penalty of 0 turns the stage off."""

    penalty: float = 0.0
    slot_words: int = 2
    min_shared: int = 2
    numbers: bool = False
    """Also contrast two titles that each name a number and share none ("Error 500 at SSO
    login" / "Error 404 on the SSO logout page", "... on Android 14" / "... on iOS 17"): a
    number is a slot every language writes alike, so this sees across languages."""
    cross_language: float = 0.0
    """The cross-language stage: a pair whose titles are in different languages (one English,
    one not: actors/duplicates/language.py) must score this much higher to warn, and the frame
    contrast, whose shared words across languages are only names and numbers ("push", "Android",
    "SSO"), does not apply to it; the number contrast still does. A multilingual model scores
    neighbours across languages higher than neighbours in one language, so this is per model
    (`[duplicates] cross_language_penalties`, docs/DUPLICATES.md); 0 turns the stage off."""


ENGLISH_STOPWORDS = frozenset(
    """a an the to of for in on at by with and or is are be can should must my our their as via from
    into i we you it this that per not no do does""".split()
)

# Function words of English, Portuguese and Spanish: what two titles share in these says nothing
# about their frame ("the", "de", "para"). The Portuguese and Spanish ones are the language
# rule's particles (actors/duplicates/language.py), one list for both.
STOPWORDS = ENGLISH_STOPWORDS | ROMANCE_PARTICLES


@functools.lru_cache(maxsize=TITLE_CACHE_SIZE)  # per title: see title_language._reading
def content_words(title: str) -> frozenset[str]:
    """A title's words, case and accents folded, function words left out."""
    return frozenset(w for w in folded_words(title) if w not in STOPWORDS)


# Digit groups of a normalised title; "1,000" and "1.000" normalise to "1 000", joined again
# here so that they name the number 1000.
_THOUSANDS = re.compile(r"(?<!\d)\d{1,3}(?: \d{3})+(?!\d)")
_NUMBER = re.compile(r"\d+")


@functools.lru_cache(maxsize=TITLE_CACHE_SIZE)
def numbers(title: str) -> frozenset[str]:
    """The numbers a (normalised) title names, as digit strings, leading zeros dropped."""
    joined = _THOUSANDS.sub(lambda m: m.group().replace(" ", ""), title)
    return frozenset(n.lstrip("0") or "0" for n in _NUMBER.findall(joined))


def numbers_differ(a: str, b: str) -> bool:
    """Both titles name a number and no number is named by both."""
    numbers_a, numbers_b = numbers(a), numbers(b)
    return bool(numbers_a) and bool(numbers_b) and not numbers_a & numbers_b


def contrasted(a: str, b: str, contrast: Contrast, *, frame: bool = True) -> bool:
    """Whether the pair shares its frame and differs in a small slot, or (with
    `contrast.numbers`) names different numbers (see `Contrast`). `frame` false: the numbers
    alone (titles in two languages share no frame words worth comparing)."""
    if contrast.numbers and numbers_differ(a, b):
        return True
    if not frame:
        return False
    words_a, words_b = content_words(a), content_words(b)
    shared = len(words_a & words_b)
    slot = max(len(words_a - words_b), len(words_b - words_a))
    return shared >= max(contrast.min_shared, slot) and 1 <= slot <= contrast.slot_words


def staged(cosine: float, a: str, b: str, contrast: Contrast) -> float:
    """A pair's score after the stages: its cosine, less the cross-language penalty where the
    titles are in different languages, less the contrast penalty where it applies."""
    across = bool(contrast.cross_language) and across_languages(a, b)
    score = cosine - contrast.cross_language if across else cosine
    if contrast.penalty and contrasted(a, b, contrast, frame=not across):
        score -= contrast.penalty
    return score


def most_similar(
    scored: Sequence[tuple[uuid.UUID, str, float]], title: str, threshold: float, limit: int, contrast: Contrast
) -> list[Similar]:
    """Of (id, title, cosine) candidates, those whose staged score warns, the most similar first
    (ties by id, so the order is stable), at most `limit`."""
    hits = [
        Similar(record_id, reported(score))
        for record_id, other, cosine in scored
        if warns(score := staged(cosine, title, other, contrast), threshold)
    ]
    hits.sort(key=lambda s: (-s.score, str(s.id)))
    return hits[:limit]


@dataclass(frozen=True, slots=True)
class Tally:
    """How a threshold fares on labelled pairs: duplicates caught, false alarms raised."""

    caught: int
    duplicates: int
    false_alarms: int
    distinct: int


def tally(scored: Sequence[tuple[float, bool]], threshold: float) -> Tally:
    """(score, is a duplicate) pairs judged at `threshold` (inclusive)."""
    return Tally(
        caught=sum(1 for score, dup in scored if dup and warns(score, threshold)),
        duplicates=sum(1 for _, dup in scored if dup),
        false_alarms=sum(1 for score, dup in scored if not dup and warns(score, threshold)),
        distinct=sum(1 for _, dup in scored if not dup),
    )


def separating_range(scored: Sequence[tuple[float, bool]]) -> tuple[float, float] | None:
    """(lowest, highest) thresholds that warn on every duplicate and on no distinct pair: any t
    with lowest < t <= highest; None when no threshold separates them."""
    duplicates = [reported(s) for s, dup in scored if dup]
    distinct = [reported(s) for s, dup in scored if not dup]
    if not duplicates or not distinct or max(distinct) >= min(duplicates):
        return None
    return max(distinct), min(duplicates)
