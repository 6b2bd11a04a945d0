"""A recall hit's snippet, cut from its best chunk's text in the daemon (issue 24).

What PostgreSQL's `ts_headline` did for every answered record, done where it costs less: one
window of at most `max_words` words of the text, the one holding the most of the query's words
(the first such), those words marked `<b>...</b>` as ts_headline marks them. A word matches a
query word when both reduce to the same stem (lower case, possessive and common English
suffixes removed: `archiving` and `archives` meet at `archiv`); English stop words mark nothing.
With no word matched, the text's first words are the snippet, as ts_headline's.

Pure: no I/O, no state; the caller chooses the text (the chunk the vector route named, or the one
ranking best for the query's words).
"""

from __future__ import annotations

import re
from typing import Final

_WORD = re.compile(r"\S+")
_CORE = re.compile(r"[\w][\w'-]*[\w]|[\w]")
"""The part of a whitespace-separated token that is a word (punctuation around it is kept out of
the mark)."""
_QUERY_WORD = re.compile(r"[\w][\w'-]*")
_SUFFIXES: Final = (
    "ations",
    "ation",
    "ings",
    "ing",
    "edly",
    "ers",
    "er",
    "ies",
    "ied",
    "es",
    "ed",
    "ly",
    "s",
    "e",
    "y",
)
_MIN_STEM = 3
STOP_WORDS: Final = frozenset(
    "a an and are as at be but by for from has have how i if in into is it its of on or so such that the their"
    " then there these they this to was were what when where which while who why will with you your".split()
)
MARK_OPEN: Final = "<b>"
MARK_CLOSE: Final = "</b>"


def stem(word: str) -> str:
    """A crude English stem: lower case, no possessive, one common suffix off (the stem keeps at
    least three letters). Only ever compared with another `stem`."""
    word = word.lower().removesuffix("'s").strip("'-")
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= _MIN_STEM:
            return word[: -len(suffix)]
    return word


def query_stems(query: str) -> frozenset[str]:
    """The stems of the query's words that may be marked (stop words never are)."""
    words = (w.lower() for w in _QUERY_WORD.findall(query))
    stems = set()
    for word in words:
        if word in STOP_WORDS:
            continue
        stems.add(stem(word))
        # an option or a hyphenated word is also found by its parts ("--strip-components")
        stems.update(stem(part) for part in re.split(r"[-_']+", word) if part and part not in STOP_WORDS)
    return frozenset(stems)


def snippet(text: str, query: str, max_words: int, *, stems: frozenset[str] | None = None) -> str:
    """The window of at most `max_words` words of `text` holding the most query words, those
    words marked; `stems`: `query_stems(query)` when the caller has them already."""
    wanted = query_stems(query) if stems is None else stems
    tokens = list(_WORD.finditer(text))
    if not tokens:
        return ""
    hits = [_matches(token.group(), wanted) for token in tokens]
    start = _best_window([bool(h) for h in hits], max_words)
    if hits[start] is None and any(hits[start : start + max_words]):
        start = next(i for i in range(start, len(hits)) if hits[i] is not None)
    if hits[start] is not None:
        start = _sentence_start(text, tokens, start, max_words // 2)
    window = range(start, min(start + max_words, len(tokens)))
    parts: list[str] = []
    for i in window:
        token, core = tokens[i].group(), hits[i]
        if core is not None:
            token = token[: core.start()] + MARK_OPEN + core.group() + MARK_CLOSE + token[core.end() :]
        parts.append(token)
        if i + 1 in window:
            # keep the text's own spacing between words (a newline stays a newline)
            parts.append(text[tokens[i].end() : tokens[i + 1].start()])
    return "".join(parts)


def _matches(token: str, wanted: frozenset[str]) -> re.Match[str] | None:
    """The word inside `token` when it is a query word, else None."""
    core = _CORE.search(token)
    if core is None or not wanted:
        return None
    word = core.group().lower()
    if word in STOP_WORDS:
        return None
    return core if stem(word) in wanted else None


def _best_window(hits: list[bool], size: int) -> int:
    """The first start of a window of `size` tokens holding the most hits (a sliding count)."""
    if len(hits) <= size:
        return 0
    count = sum(hits[:size])
    best, best_start = count, 0
    for start in range(1, len(hits) - size + 1):
        count += hits[start + size - 1] - hits[start - 1]
        if count > best:
            best, best_start = count, start
    return best_start


def _sentence_start(text: str, tokens: list[re.Match[str]], first: int, reach: int) -> int:
    """Where the sentence holding token `first` begins (after a word ending a sentence, or a
    blank line), looking back at most `reach` words: the snippet opens there, not mid-way
    through the text before it."""
    start = first
    while start > 0 and first - start < reach:
        before = tokens[start - 1]
        if before.group().endswith((".", "!", "?", ":")) or "\n\n" in text[before.end() : tokens[start].start()]:
            break
        start -= 1
    return start
