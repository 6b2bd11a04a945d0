from __future__ import annotations

import itertools
import random
import re

import pytest

from actors.chunking import DEFAULT_MAX_CHARS, DEFAULT_OVERLAP, chunk_spans, chunk_text

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
