from __future__ import annotations

import itertools
import random
import re
import sys
import time
from types import FrameType

import pytest

from recalld.actors.index.chunking import DEFAULT_MAX_CHARS, DEFAULT_OVERLAP, chunk_spans, chunk_text

PARAGRAPHS = "Alpha one. Alpha two.\n\nBeta one is longer. Beta two.\n\nGamma."
WORDS = " ".join(f"w{i:03d}" for i in range(60))  # 60 words of 4 chars, 299 chars


@pytest.mark.parametrize(
    ("body", "max_chars", "overlap", "expected"),
    [
        ("", 100, 10, [""]),
        ("   \n\n  ", 100, 10, [""]),
        ("short body", 100, 10, ["short body"]),
        ("  padded body \n", 100, 10, ["padded body"]),
        ("exactly ten", 11, 2, ["exactly ten"]),
        # Paragraph breaks win over sentence ends when both fit the far half of the window.
        (PARAGRAPHS, 40, 0, ["Alpha one. Alpha two.", "Beta one is longer. Beta two.\n\nGamma."]),
        (PARAGRAPHS, 34, 0, ["Alpha one. Alpha two.", "Beta one is longer. Beta two.", "Gamma."]),
        # Sentence ends win over plain spaces.
        (
            "One two three. Four five six. Seven eight nine.",
            32,
            0,
            ["One two three. Four five six.", "Seven eight nine."],
        ),
        # Only spaces: cut between words, never inside one.
        ("aaaa bbbb cccc dddd eeee", 10, 0, ["aaaa bbbb", "cccc dddd", "eeee"]),
        # A word longer than a chunk is the only thing ever cut.
        ("x" * 25, 10, 3, ["x" * 10, "x" * 10, "x" * 5]),
        ("ab " + "y" * 12 + " cd", 10, 0, ["ab", "y" * 10, "yy cd"]),
        # Overlap starts at a sentence when one starts inside the overlap window.
        (
            "First one here. Second one. Third sentence here.",
            30,
            14,
            ["First one here. Second one.", "Second one. Third sentence", "Third sentence here."],
        ),
        # A single newline counts as a sentence end (lists, headings).
        ("- item one\n- item two\n- item three", 24, 0, ["- item one\n- item two", "- item three"]),
    ],
)
def test_chunk_text_table(body: str, max_chars: int, overlap: int, expected: list[str]) -> None:
    assert chunk_text(body, max_chars=max_chars, overlap=overlap) == expected


@pytest.mark.parametrize(("max_chars", "overlap"), [(0, 0), (10, 10), (10, -1), (10, 11)])
def test_bad_sizes_are_refused(max_chars: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk_text("text", max_chars=max_chars, overlap=overlap)


def test_defaults_are_about_a_thousand_with_overlap() -> None:
    assert DEFAULT_MAX_CHARS == 1000 and DEFAULT_OVERLAP == 150
    body = "\n\n".join(" ".join([f"Sentence number {j} is here." for j in range(12)]) for _ in range(10))
    chunks = chunk_text(body)
    assert len(chunks) > 1 and all(len(c) <= 1000 for c in chunks)
    # Consecutive chunks share text (the overlap).
    assert all(a[-40:].split()[-1] in b for a, b in itertools.pairwise(chunks))


def _random_body(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 40)):
        word = "".join(rng.choice("abcdefghij") for _ in range(rng.choice([1, 3, 5, 8, 13, 40, 130])))
        parts.append(word)
        parts.append(rng.choice([" ", " ", " ", ". ", "! ", "\n", "\n\n", "  \t", "? "]))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(200))
def test_properties_hold_for_random_bodies(seed: int) -> None:
    rng = random.Random(seed)
    body = _random_body(rng)
    max_chars = rng.choice([8, 20, 50, 120, 400])
    overlap = rng.choice([0, max_chars // 4, max_chars // 2, max_chars - 1])
    spans = chunk_spans(body, max_chars=max_chars, overlap=overlap)
    chunks = chunk_text(body, max_chars=max_chars, overlap=overlap)
    assert chunks == chunk_text(body, max_chars=max_chars, overlap=overlap)  # deterministic
    assert [body[s:e] for s, e in spans] == chunks
    if not body.strip():
        assert chunks == [""]
        return
    long_words = {m.span() for m in re.finditer(r"\S+", body) if m.end() - m.start() > max_chars}
    covered = [False] * len(body)
    previous = (-1, -1)
    for start, end in spans:
        chunk = body[start:end]
        assert 0 < len(chunk) <= max_chars
        assert chunk == chunk.strip()
        assert start > previous[0] and end > previous[1]  # in order, always progressing
        if previous[1] >= 0:
            assert previous[1] - start <= overlap  # overlap is bounded
        for edge in (start, end):
            inside_word = 0 < edge < len(body) and not body[edge - 1].isspace() and not body[edge].isspace()
            if inside_word:
                assert any(a < edge < b for a, b in long_words), (edge, chunk)
        for i in range(start, end):
            covered[i] = True
        previous = (start, end)
    assert all(covered[i] for i, ch in enumerate(body) if not ch.isspace())


# -- size: the largest allowed body is chunked in linear time, with the same chunks as before

SENTENCES = "The quick brown fox jumps over the lazy dog near the river bank. Then it rests.\n"


def _sentences(length: int) -> str:
    return (SENTENCES * (length // len(SENTENCES) + 1))[:length]


_SPACE = re.compile(r"\s*")


def _reference_spans(body: str, max_chars: int, overlap: int) -> list[tuple[int, int]]:
    """The chunker as it was before it was made linear (it scanned every gap per chunk): the
    reference the linear one must agree with, span for span. Kept small and obvious on purpose."""
    text_start, text_end = len(body) - len(body.lstrip()), len(body.rstrip())
    if text_end - text_start <= max_chars:
        return [(text_start, max(text_start, text_end))]
    gaps = []  # (start, end, level): 3 paragraph, 2 sentence or line, 1 word
    for m in re.finditer(r"\s+", body[:text_end]):
        if m.start() < text_start:
            continue
        sentence = re.search(r"[.!?…。！？][\"'”’)\]]*$", body[max(text_start, m.start() - 4) : m.start()])
        newlines = m.group().count("\n")
        gaps.append((m.start(), m.end(), 3 if newlines >= 2 else 2 if newlines == 1 or sentence else 1))
    spans: list[tuple[int, int]] = []
    start = text_start
    while text_end - start > max_chars:
        previous_end = spans[-1][1] if spans else start
        window = [g for g in gaps if max(start, previous_end) < g[0] <= start + max_chars]
        cut = next(
            (
                [g for g in window if g[2] >= level and g[0] > floor][-1]
                for floor in (start + max_chars // 2, start)
                for level in (3, 2, 1)
                if any(g[2] >= level and g[0] > floor for g in window)
            ),
            None,
        )
        if cut is None and start < previous_end:
            start = _SPACE.match(body, previous_end).end()
        elif cut is None:
            spans.append((start, start + max_chars))
            start = _SPACE.match(body, start + max_chars).end()
        else:
            spans.append((start, cut[0]))
            tail = [g for g in gaps if g[1] >= max(cut[0] - overlap, start + 1) and g[0] < cut[0]]
            starts = [g[1] for level in (2, 1) for g in tail if g[2] >= level] if overlap else []
            start = starts[0] if starts else cut[1]
    return [*spans, (start, text_end)]


def _mixed_body(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 200)):
        parts.append("".join(rng.choice("abcdefghij") for _ in range(rng.choice([1, 2, 3, 5, 8, 13, 40, 130]))))
        parts.append(rng.choice([" ", " ", " ", ". ", "! ", "\n", "\n\n", "  \t", "? ", '." ', "… ", "\n \n", "。"]))
    return rng.choice(["", "  \n"]) + "".join(parts)


@pytest.mark.parametrize("seed", range(300))
def test_same_chunks_as_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    body = _mixed_body(rng)
    max_chars = rng.choice([1, 3, 8, 20, 50, 120, 400, DEFAULT_MAX_CHARS])
    overlap = rng.choice(
        sorted({0, max_chars // 4, max_chars // 2, max_chars - 1, min(DEFAULT_OVERLAP, max_chars - 1)})
    )
    assert chunk_spans(body, max_chars=max_chars, overlap=overlap) == _reference_spans(body, max_chars, overlap)


def test_same_chunks_as_the_reference_for_a_long_body() -> None:
    body = _sentences(60_000) + "\n\n" + "z" * 2500 + " tail words here."
    assert chunk_spans(body) == _reference_spans(body, DEFAULT_MAX_CHARS, DEFAULT_OVERLAP)


def _chunking_lines_run(body: str) -> int:
    """Lines of chunking code executed for `body`: a measure of work that no machine load skews."""
    import recalld.actors.index.chunking as module

    lines = 0

    def trace_lines(frame: FrameType, event: str, arg: object) -> object:
        nonlocal lines
        lines += event == "line"
        return trace_lines

    def trace_calls(frame: FrameType, event: str, arg: object) -> object:
        return trace_lines if frame.f_code.co_filename == module.__file__ else None

    sys.settrace(trace_calls)
    try:
        chunk_spans(body)
    finally:
        sys.settrace(None)
    return lines


def test_work_grows_linearly_with_the_body() -> None:
    # Four times the body, about four times the work; chunking that rescans every gap for each
    # chunk does about sixteen times (measured 14x), and a 4 MB body then took two minutes.
    small, large = (_chunking_lines_run(_sentences(n)) for n in (25_000, 100_000))
    assert large < 6 * small, (small, large)


def test_the_largest_body_is_chunked_in_seconds() -> None:
    # Under the 4,194,304-character limit for a body; about a second here (it took 112 s when
    # chunking was quadratic). The bound is generous: a loaded machine must not fail it.
    body = _sentences(4_000_000)
    started = time.perf_counter()
    spans = chunk_spans(body)
    elapsed = time.perf_counter() - started
    assert elapsed < 15, f"chunking 4,000,000 characters took {elapsed:.1f} s"
    assert len(spans) > 4000 and spans[-1][1] == len(body.rstrip())
