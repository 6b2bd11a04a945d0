"""The daemon's snippet: the window with the most query words, those words marked."""

from __future__ import annotations

import pytest

from actors.snippets import query_stems, snippet, stem


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("archiving", "archives"),
        ("archive", "archived"),
        ("Replica", "replicas"),
        ("utility's", "utility"),
        ("compression", "compressions"),
    ],
)
def test_forms_of_one_word_share_a_stem(a: str, b: str) -> None:
    assert stem(a) == stem(b)


@pytest.mark.parametrize(("a", "b"), [("tar", "tape"), ("mount", "amount"), ("dir", "dirt")])
def test_other_words_do_not(a: str, b: str) -> None:
    assert stem(a) != stem(b)


@pytest.mark.parametrize(
    ("text", "query", "words", "expected"),
    [
        # the matched words are marked, punctuation outside the mark
        ("an archiving utility, for tapes.", "archive utility", 30, "an <b>archiving</b> <b>utility</b>, for tapes."),
        # stop words mark nothing
        ("the tar archive of the day", "the archive", 30, "the tar <b>archive</b> of the day"),
        # nothing matched: the first words
        ("one two three four five", "zebra", 3, "one two three"),
        # the window holding the most query words, from a little before its first hit
        (
            "alpha beta gamma delta write-ahead log replica epsilon zeta eta",
            "replica log",
            5,
            "delta write-ahead <b>log</b> <b>replica</b> epsilon",
        ),
        # ... or from the start of the sentence holding it, when that is near
        (
            "them monthly. Roses like sun and well-drained soil; feed them monthly.\n\n"
            "Writes are acknowledged once a quorum of three replicas has persisted the entry.",
            "quorum",
            30,
            "Writes are acknowledged once a <b>quorum</b> of three replicas has persisted the entry.",
        ),
        (
            "Roses like sun. Prune them early and feed them a quorum",
            "quorum",
            30,
            "Prune them early and feed them a <b>quorum</b>",
        ),
        # an option is found whole and by its parts
        ("use --strip-components to drop", "--strip-components", 30, "use --<b>strip-components</b> to drop"),
        # the text's own spacing between words is kept
        ("dumped at 02:00\nto cold storage", "cold", 30, "dumped at 02:00\nto <b>cold</b> storage"),
        ("", "anything", 30, ""),
    ],
)
def test_snippet(text: str, query: str, words: int, expected: str) -> None:
    assert snippet(text, query, words) == expected


def test_a_window_never_holds_more_than_the_words_asked_for() -> None:
    text = " ".join(f"w{i}" for i in range(100)) + " target " + " ".join(f"v{i}" for i in range(100))
    cut = snippet(text, "target", 30)
    assert len(cut.split()) == 30 and "<b>target</b>" in cut


def test_query_stems_skip_stop_words() -> None:
    assert query_stems("what is the archive") == frozenset({stem("archive")})
