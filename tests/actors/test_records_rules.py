"""Exact-duplicate normalisation and content hashes."""

from __future__ import annotations

import pytest

from recalld.actors.records import content_hash, normalise_title, query_hash


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Rotate the signing keys every ninety days", "  rotate the SIGNING keys, every ninety days! "),
        ("pg_dump --clean", "PG DUMP  CLEAN"),
        ("Ünïcode Title", "ünïcode   title"),
        ("ﬁle ﬂow", "file flow"),  # NFKC folds ligatures
        ("Tabs\tand\nnewlines", "tabs and newlines"),
        ("!!!", "  !!! "),  # no letter or digit: symbols kept, whitespace still folded
    ],
)
def test_titles_that_must_collide(a: str, b: str) -> None:
    assert normalise_title(a) == normalise_title(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Backup nightly", "Backup weekly"),
        ("Version 1.2", "Version 12x"),
        ("日本語のタイトル", "中文标题"),
        ("!!!", "???"),
        ("→", "←"),
    ],
)
def test_titles_that_must_not_collide(a: str, b: str) -> None:
    assert normalise_title(a) != normalise_title(b)


def test_content_hash_covers_every_field() -> None:
    base = {"kind": "doc", "title": "t", "body": "b", "attributes": {"x": 1}, "source_path": None}
    reference = content_hash(**base)
    for field, other in [
        ("kind", "rule"),
        ("title", "T"),
        ("body", "c"),
        ("attributes", {"x": 2}),
        ("source_path", "/p"),
    ]:
        assert content_hash(**{**base, field: other}) != reference, field
    assert content_hash(**{**base, "attributes": {"x": 1}}) == reference


def test_query_hash_is_per_namespace_and_not_the_text() -> None:
    assert query_hash("a", "secret words") != query_hash("b", "secret words")
    assert "secret" not in query_hash("a", "secret words")
