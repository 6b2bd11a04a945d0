from __future__ import annotations

import pytest

from recalld.actors.embedding.template import (
    LATEST_VERSION,
    InputKind,
    UnknownTemplateVersion,
    fingerprint,
    render,
    render_document,
    render_query,
    render_title,
)


@pytest.mark.parametrize(
    ("title", "chunk", "expected"),
    [
        ("Refunds", "Refunds take five days.", "Refunds\n\nRefunds take five days."),
        ("  Refunds \n", "\nRefunds take five days.  ", "Refunds\n\nRefunds take five days."),
        ("", "Only a body.", "Only a body."),
    ],
)
def test_v1_document_template(title: str, chunk: str, expected: str) -> None:
    rendered = render_document(title, chunk, version=1)
    assert rendered.text == expected
    assert rendered.template_version == 1 and rendered.kind is InputKind.DOCUMENT


def test_v1_query_and_title_are_the_text_itself() -> None:
    assert render_query("  how long do refunds take? ", version=1).text == "how long do refunds take?"
    assert render_title(" Refund policy ", version=1).text == "Refund policy"
    assert render(InputKind.QUERY, version=1, text="q").text == "q"
    assert render(InputKind.DOCUMENT, version=1, title="t", text="c").text == "t\n\nc"
    assert render(InputKind.TITLE, version=1, title="t").kind is InputKind.TITLE


def test_unknown_version_is_refused() -> None:
    with pytest.raises(UnknownTemplateVersion):
        render_query("q", version=LATEST_VERSION + 1)


def test_fingerprint_reveals_hash_and_length_only() -> None:
    text = "secret customer complaint about invoices"
    fp = fingerprint(text)
    assert fp.startswith("sha256:") and fp.endswith(f"/{len(text)}ch")
    assert "secret" not in fp and "invoice" not in fp
    assert fp == fingerprint(text) != fingerprint(text + ".")
    assert render_query(text, version=1).fingerprint() == fp
