"""Split a record body into the chunks that are embedded one by one; pure and deterministic.

A chunk hit is a record hit, so chunks only need to be small enough for the embedding model and
to overlap a little, so that a sentence cut at a chunk's end still reaches the model whole in the
next chunk. Cuts prefer paragraph breaks, then sentence ends, then any whitespace; a word is cut
only when it alone is longer than a chunk.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

DEFAULT_MAX_CHARS = 1000
DEFAULT_OVERLAP = 150

# Boundary strengths: a cut on a stronger boundary keeps more meaning together.
_PARAGRAPH = 3
_SENTENCE = 2
_WORD = 1

_WHITESPACE = re.compile(r"\s+")
# A sentence ends with terminal punctuation, optionally followed by closing quotes or brackets.
_SENTENCE_END = re.compile(r"[.!?…。！？][\"'”’)\]]*$")


@dataclass(frozen=True, slots=True)
class _Gaps:
    """The runs of whitespace between pieces of text, in body order: a run's start ends a chunk,
    its end starts one. Runs never touch, so starts and ends both ascend and can be bisected:
    each chunk looks only at the gaps inside its own window, which keeps chunking linear in the
    body's length (scanning every gap per chunk made a 4 MB body take minutes)."""

    starts: list[int]
    ends: list[int]
    levels: list[int]


def chunk_text(body: str, *, max_chars: int = DEFAULT_MAX_CHARS, overlap: int = DEFAULT_OVERLAP) -> list[str]:
    """Split `body` into chunks of at most `max_chars` characters, in order.

    Guarantees: at least one chunk (an empty or whitespace-only body gives `[""]`); every chunk
    is a stripped substring of `body`, non-empty unless the body is; chunks appear in body order
    and together cover every non-whitespace character; consecutive chunks share at most
    `overlap` characters, the shared part starting on a sentence or word boundary; a chunk is
    cut inside a word only when that word alone is longer than `max_chars`. Same input, same
    output.
    """
    return [body[start:end] for start, end in chunk_spans(body, max_chars=max_chars, overlap=overlap)]


def chunk_spans(
    body: str, *, max_chars: int = DEFAULT_MAX_CHARS, overlap: int = DEFAULT_OVERLAP
) -> list[tuple[int, int]]:
    """The `(start, end)` offsets in `body` of the chunks `chunk_text` returns (same guarantees)."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    if not 0 <= overlap < max_chars:
        raise ValueError(f"overlap must be in [0, max_chars), got {overlap}")

    text_start, text_end = _strip_bounds(body, 0, len(body))
    if text_end - text_start <= max_chars:
        return [(text_start, text_end)]

    gaps = _gaps(body, text_start, text_end)
    spans: list[tuple[int, int]] = []
    start = text_start
    while True:
        if text_end - start <= max_chars:
            spans.append((start, text_end))
            return spans
        previous_end = spans[-1][1] if spans else start
        cut = _best_cut(gaps, start, previous_end, max_chars)
        if cut is None and start < previous_end:
            # The overlap left no room to reach the next gap: give the overlap up, not a word.
            start = _strip_bounds(body, previous_end, text_end)[0]
            continue
        if cut is None:
            # One word longer than a chunk: the only place where a word is cut.
            end = start + max_chars
            spans.append((start, end))
            start = _strip_bounds(body, end, text_end)[0]
            continue
        spans.append((start, gaps.starts[cut]))
        start = _overlap_start(gaps, start, cut, overlap)


def _strip_bounds(body: str, start: int, end: int) -> tuple[int, int]:
    while start < end and body[start].isspace():
        start += 1
    while end > start and body[end - 1].isspace():
        end -= 1
    return start, end


def _gaps(body: str, start: int, end: int) -> _Gaps:
    gaps = _Gaps([], [], [])
    for match in _WHITESPACE.finditer(body, start, end):
        run = match.group()
        newlines = run.count("\n")
        if newlines >= 2:
            level = _PARAGRAPH
        elif newlines == 1 or _SENTENCE_END.search(body, max(start, match.start() - 4), match.start()):
            # A single line break ends a list item or heading as surely as a full stop does.
            level = _SENTENCE
        else:
            level = _WORD
        gaps.starts.append(match.start())
        gaps.ends.append(match.end())
        gaps.levels.append(level)
    return gaps


def _best_cut(gaps: _Gaps, start: int, previous_end: int, max_chars: int) -> int | None:
    """The index of the gap to end the chunk at: strongest boundary, then fullest chunk.

    A strong boundary close to `start` would leave a tiny chunk, so the first pass only looks at
    the far half of the window; the cut must also pass the previous chunk's end, or the next chunk
    would add nothing new.
    """
    starts, levels = gaps.starts, gaps.levels
    # Candidates: gaps starting in (max(start, previous_end), start + max_chars].
    first = bisect_right(starts, max(start, previous_end))
    stop = bisect_right(starts, start + max_chars, first)
    for floor in (start + max_chars // 2, start):
        lowest = bisect_right(starts, floor, first, stop)
        for level in (_PARAGRAPH, _SENTENCE, _WORD):
            # The last qualifying candidate is the fullest chunk.
            for index in range(stop - 1, lowest - 1, -1):
                if levels[index] >= level:
                    return index
    return None


def _overlap_start(gaps: _Gaps, start: int, cut: int, overlap: int) -> int:
    """Where the next chunk starts: inside the chunk just cut, at most `overlap` before its end.

    A sentence start is preferred, then a word start; without a gap in that tail the next chunk
    starts right after the cut (the gap at index `cut`).
    """
    if overlap == 0:
        return gaps.ends[cut]
    # The tail: gaps before the cut that end at or after `cut start - overlap` and after `start`.
    first = bisect_left(gaps.ends, max(gaps.starts[cut] - overlap, start + 1), 0, cut)
    for level in (_SENTENCE, _WORD):
        for index in range(first, cut):
            if gaps.levels[index] >= level:
                return gaps.ends[index]
    return gaps.ends[cut]
