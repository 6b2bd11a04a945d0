"""The duplicate check's pure rules (actors/duplicates/rules.py): what a title is embedded as, which
scores warn, the contrast stage, the order of the similar, and the calibration tallies."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from recalld.actors.duplicates.rules import (
    Contrast,
    Tally,
    catch_up,
    content_words,
    contrasted,
    most_similar,
    numbers,
    reported,
    separating_range,
    staged,
    tally,
    title_key,
    title_text,
    warns,
)

ON = Contrast(penalty=0.25, slot_words=2)


@pytest.mark.parametrize(
    ("title", "text"),
    [
        ("  Reset the PASSWORD, by e-mail! ", "reset the password by e mail"),
        ("Exportar relatório: vendas", "exportar relatório vendas"),
    ],
)
def test_a_title_is_embedded_normalised(title: str, text: str) -> None:
    assert title_text(title) == text


def test_the_key_of_a_title_is_the_sha256_of_its_normalised_text() -> None:
    assert title_key("reset password") == hashlib.sha256(b"reset password").hexdigest()


@pytest.mark.parametrize(
    ("score", "threshold", "expected"),
    [
        (0.49, 0.49, True),  # equal warns
        (0.4900004, 0.49, True),
        (0.4899996, 0.49, True),  # equal as reported (6 decimals)
        (0.489999, 0.49, False),
        (0.9, 0.49, True),
        (-0.2, 0.49, False),
    ],
)
def test_the_threshold_is_inclusive_at_the_reported_precision(score: float, threshold: float, expected: bool) -> None:
    assert warns(score, threshold) is expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("Export monthly sales report to CSV", "Export monthly sales report to PDF", True),
        ("Add dark mode to the mobile app", "Add dark mode to the web dashboard", True),
        ("Exportar relatório mensal de vendas em PDF", "Exportar relatório mensal de estoque em PDF", True),
        # paraphrases share fewer words than a frame
        ("Search results should be sortable by price", "Let users order product search results by price", False),
        ("Discount codes cannot be combined", "Only one coupon may be applied per order", False),
        # one shared content word is no frame
        ("Refund approvals", "Refund policy", False),
        # the same content words: no slot differs, so nothing contrasts
        ("Export the report", "Export a report", False),
    ],
)
def test_contrast_finds_titles_that_differ_in_a_small_slot(a: str, b: str, expected: bool) -> None:
    assert contrasted(title_text(a), title_text(b), ON) is expected


THREE = Contrast(penalty=0.25, slot_words=3)  # the slot the configuration ships with


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # the frame outweighs the slot: two neighbouring items
        ("Export the sales report to CSV", "Export the sales report to PDF", True),
        ("Add dark mode to the mobile app", "Add dark mode to the web dashboard", True),
        ("Dark mode on the mobile app", "Dark mode on the web dashboard", True),  # as many shared as differ
        # two key nouns shared, more words said otherwise on a side: a paraphrase, not a frame
        ("Users can export their invoices as PDF", "Allow downloading invoices in PDF format", False),
        # the rule's measured cost: a neighbour it no longer contrasts (docs/DUPLICATES.md)
        ("Relatório de vendas não mostra devoluções", "Relatório de vendas demora para carregar", False),
    ],
)
def test_a_frame_shares_at_least_as_many_content_words_as_its_slot(a: str, b: str, expected: bool) -> None:
    assert contrasted(title_text(a), title_text(b), THREE) is expected


NUMBERS = Contrast(penalty=0.25, slot_words=2, numbers=True)


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Error 404 on the SSO logout page", {"404"}),
        ("Refunds above 1,000 EUR", {"1000"}),  # thousands separators, either way, name one number
        ("Pedidos acima de R$ 1.500,00", {"1500", "0"}),
        ("Attachments over 10MB", {"10"}),
        ("Room 007 and 12345 678", {"7", "12345", "678"}),  # a group of 5 digits is no thousands
        ("Lock the account after five failed attempts", set()),  # words are not read as numbers
    ],
)
def test_the_numbers_a_title_names(title: str, expected: set[str]) -> None:
    assert numbers(title_text(title)) == expected


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        # each names a number, none shared: two items, whatever the words or languages
        ("Erro 500 ao fazer login com SSO", "Error 404 on the SSO logout page", True),
        ("Push notifications not delivered on Android 14", "Push notifications arrive twice on iOS 17", True),
        # a number in common: the same item may be said twice
        ("Refunds over 1000 EUR need two approvals", "Two approvers for refunds above 1,000 EUR", False),
        ("Erro 500 ao fazer login com SSO", "Error 500 when logging in with SSO", False),
        # a number on one side only says nothing ("five" / "5")
        ("Lock account after five failed login attempts", "Block the user after 5 wrong passwords", False),
        ("Block the user after 5 wrong passwords", "Lock account after five failed login attempts", False),
    ],
)
def test_contrast_finds_titles_that_name_other_numbers(a: str, b: str, expected: bool) -> None:
    assert contrasted(title_text(a), title_text(b), NUMBERS) is expected
    assert not contrasted(title_text(a), title_text(b), ON)  # off unless asked for


def test_content_words_fold_case_and_accents_and_drop_function_words() -> None:
    assert content_words("A Emissão de NOTA fiscal") == {"emissao", "nota", "fiscal"}


@pytest.mark.parametrize(
    ("cosine", "a", "b", "contrast", "expected"),
    [
        (0.8, "export sales report to csv", "export sales report to pdf", ON, 0.55),
        (0.8, "export sales report to csv", "download each month s sales as a csv file", ON, 0.8),
        (0.8, "export sales report to csv", "export sales report to pdf", Contrast(penalty=0.0), 0.8),
    ],
)
def test_staged_takes_the_penalty_only_from_contrasting_pairs(
    cosine: float, a: str, b: str, contrast: Contrast, expected: float
) -> None:
    assert reported(staged(cosine, a, b, contrast)) == expected


CROSS = Contrast(penalty=0.25, slot_words=3, numbers=True, cross_language=0.18)


@pytest.mark.parametrize(
    ("cosine", "a", "b", "contrast", "expected"),
    [
        # across languages: the cross-language penalty, not the frame contrast (the shared words
        # of a translation are its names: "push", "android")
        (0.9, "redefinir senha por e mail", "change account email address", CROSS, 0.72),
        (0.9, "notificações push não chegam no android", "push notifications not delivered on android", CROSS, 0.72),
        # the number contrast still applies across languages
        (0.9, "erro 500 ao fazer login com sso", "error 404 on the sso logout page", CROSS, 0.47),
        (0.9, "erro 500 ao fazer login com sso", "error 500 when logging in with sso", CROSS, 0.72),
        # within one language nothing changes
        (0.9, "export sales report to csv", "export sales report to pdf", CROSS, 0.65),
        (0.9, "reset password via email", "change account email address", CROSS, 0.9),
        # a paraphrase that shares two key nouns and says the rest otherwise: no frame, no penalty
        (0.722, "users can export their invoices as pdf", "allow downloading invoices in pdf format", CROSS, 0.722),
        # PT-ES counts as one language: the frame contrast applies, no cross-language penalty
        (0.9, "login com sso não funciona no android", "login con sso no funciona en ios", CROSS, 0.65),
        # ... where the two share a frame: a PT-ES translation that shares only its names ("push",
        # "android") has fewer words in common than it says otherwise
        (0.9, "notificações push não chegam no android", "las notificaciones push no llegan en android", CROSS, 0.9),
        # 0 turns the stage off: the frame contrast applies across languages again
        (
            0.9,
            "login com sso não funciona no android",
            "sso login does not work on android",
            Contrast(penalty=0.25, slot_words=3, numbers=True),
            0.65,
        ),
    ],
)
def test_staged_takes_the_cross_language_penalty_from_pairs_across_languages(
    cosine: float, a: str, b: str, contrast: Contrast, expected: float
) -> None:
    assert reported(staged(cosine, a, b, contrast)) == expected


def test_most_similar_orders_by_score_then_id_and_cuts_at_the_limit() -> None:
    ids = [uuid.UUID(int=i) for i in range(5)]
    scored = [
        (ids[3], "alpha one", 0.7),
        (ids[1], "beta two", 0.9),
        (ids[2], "gamma three", 0.7),
        (ids[4], "delta four", 0.3),  # below the threshold
        (ids[0], "export sales report to pdf", 0.9),  # contrasts with the title: 0.65
    ]
    hits = most_similar(scored, "export sales report to csv", 0.5, 3, ON)
    assert [(h.id, h.score) for h in hits] == [(ids[1], 0.9), (ids[2], 0.7), (ids[3], 0.7)]


def test_tally_and_the_separating_range() -> None:
    scored = [(0.9, True), (0.7, True), (0.6, False), (0.2, False)]
    assert tally(scored, 0.7) == Tally(caught=2, duplicates=2, false_alarms=0, distinct=2)
    assert tally(scored, 0.6) == Tally(caught=2, duplicates=2, false_alarms=1, distinct=2)
    assert separating_range(scored) == (0.6, 0.7)
    assert separating_range([*scored, (0.75, False)]) is None
    assert separating_range([(0.5, True)]) is None


@pytest.mark.parametrize(
    ("unstored", "own", "bound", "room", "taken", "left"),
    [
        (["a", "b", "c"], [], 31, 31, ["c", "b", "a"], False),  # the newest first
        (["a", "b", "c"], [], 2, 31, ["c", "b"], True),  # the bound
        (["a", "b", "c"], [], 31, 1, ["c"], True),  # the call's room
        (["a", "b", "c"], [], 31, -4, [], True),  # no room at all: the own titles fill the call
        (["a", "b", "a"], [], 31, 31, ["a", "b"], False),  # a title shared by two records, once
        (["a", "new", "b"], ["new"], 31, 31, ["b", "a"], False),  # the check's own titles are embedded anyway
        (["a", "b"], [], 0, 31, [], True),  # 0 turns catching up off
        ([], ["new"], 31, 31, [], False),
    ],
)
def test_a_check_catches_up_the_newest_titles_without_a_vector(
    unstored: list[str], own: list[str], bound: int, room: int, taken: list[str], left: bool
) -> None:
    assert catch_up(unstored, own, bound, room) == (taken, left)
