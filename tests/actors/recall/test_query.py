"""Query building for full-text search, table-driven: identifiers survive, nothing is negated."""

from __future__ import annotations

import pytest

from recalld.actors.recall.query import Evidence, QueryKind, banded_score, build_text_query, evidence_of, is_identifier


@pytest.mark.parametrize(
    ("query", "strict", "loose"),
    [
        # a leading dash is an option, never websearch's NOT
        ("pg_ctl -m fast", "pg_ctl m fast", "pg_ctl or m or fast"),
        ("--strip-components", "strip-components", "strip-components"),
        ("--clean --if-exists", "clean if-exists", "clean or if-exists"),
        ("(-m)", "m", "m"),
        # `=` splits an option from its value, so the value is a term of its own
        (
            "pg_basebackup --wal-method=stream",
            "pg_basebackup wal-method stream",
            "pg_basebackup or wal-method or stream",
        ),
        ("work_mem=64MB", "work_mem 64MB", "work_mem or 64MB"),
        ("x=-1", "x 1", "x or 1"),
        # dashes that would start a word after punctuation are dropped too
        ("foo <-> bar", "foo bar", "foo or bar"),
        ("a - b", "a b", "a or b"),
        # calls lose their parentheses, arguments become terms
        ("gen_random_uuid()", "gen_random_uuid", "gen_random_uuid"),
        ("to_char(now(), 'YYYY')", "to_char now YYYY", "to_char or now or YYYY"),
        # sentence punctuation around a token is not part of it; inner dots are
        ("FATAL: no pg_hba.conf entry", "FATAL no pg_hba.conf entry", "FATAL or no or pg_hba.conf or entry"),
        ("what is pg_stat_statements.track?", "what is pg_stat_statements.track", None),
        # user phrases stay phrases; an unbalanced quote is ignored
        ('the "right" way', 'the "right" way', 'the or "right" or way'),
        ('"foo -bar" baz', '"foo bar" baz', '"foo bar" or baz'),
        ('"unbalanced phrase', "unbalanced phrase", "unbalanced or phrase"),
        # `or` makes the terms on either side alternatives in strict, never a term in loose;
        # websearch alone would read `create or update a function` as create, or the rest
        ("char or varchar", "char or varchar", "char or varchar"),
        ("or foo or", "foo", "foo"),
        ("OR", "", ""),
        ("create or update a function", "create a function or update a function", None),
        ("pg_dump or pg_restore --clean", "pg_dump clean or pg_restore clean", None),
        ("x or --wal-method=stream y", "x y or wal-method stream y", None),
        ('"foo bar" or baz qux', '"foo bar" qux or baz qux', '"foo bar" or baz or qux'),
        ("a or b c or d", "a c or a d or b c or b d", "a or b or c or d"),
        ("index or index scan", "index scan", "index or scan"),
        # past MAX_READINGS (8) readings, websearch's own: 16 here
        ("a or b c or d e or f g or h", "a or b c or d e or f g or h", None),
        # repeated terms are asked for once in loose
        ("index index scan", "index index scan", "index or scan"),
        # nothing searchable
        ("", "", ""),
        ("-- ?!", "", ""),
    ],
)
def test_strict_and_loose_strings(query: str, strict: str, loose: str | None) -> None:
    built = build_text_query(query)
    assert built.strict == strict
    if loose is not None:
        assert built.loose == loose
    assert built.empty == (strict == "")


@pytest.mark.parametrize(
    "query",
    ["pg_ctl -m fast", "--no-owner", "a <-> b", "x=-1", '"-m" -n', "tar -xzf file", "(-1)", "---x"],
)
def test_no_term_is_ever_negated(query: str) -> None:
    built = build_text_query(query)
    for text in (built.strict, built.loose):
        assert all(not term.lstrip('"').startswith("-") for term in text.split())
        assert "<-" not in text and "->" not in text


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("-m", True),
        ("--no-owner", True),
        ("--wal-method=stream", True),
        ("max_wal_size", True),
        ("pg_dump", True),
        ("pg_hba.conf", True),
        ("gen_random_uuid()", True),
        ("now()", True),
        ("work_mem=64MB", True),
        ("23505", True),
        ("42P01", True),
        ("maxConnections", True),
        ("ServerAliveInterval", True),
        ("StrictHostKeyChecking", True),
        ("PostgreSQL", False),
        ("JavaScript", False),
        ("100", False),
        ("5432", False),
        ("\\gexec", True),
        ("\\dt+", True),
        ("\\", False),
        ("'unique_violation',", True),
        ("index", False),
        ("FATAL:", False),
        ("Postgres", False),
        ("auto-increments", False),
        ("e.g.", False),
        ("12", False),
        ("-", False),
        ("", False),
    ],
)
def test_identifier_shapes(token: str, expected: bool) -> None:
    assert is_identifier(token) is expected


@pytest.mark.parametrize(
    ("query", "kind", "identifiers"),
    [
        ("pg_ctl -m fast", QueryKind.IDENTIFIER, ("pg_ctl", "m")),
        ("ERRCODE 23505 unique_violation", QueryKind.IDENTIFIER, ("23505", "unique_violation")),
        ("--checkpoint=fast", QueryKind.IDENTIFIER, ("checkpoint", "fast")),
        ("5432", QueryKind.IDENTIFIER, ("5432",)),  # a number alone is looked up as one
        ("find files bigger than 100 megabytes", QueryKind.NATURAL, ()),  # in a sentence, a quantity
        ("ServerAliveInterval", QueryKind.IDENTIFIER, ("ServerAliveInterval",)),
        ("how do I make a column that auto-increments", QueryKind.NATURAL, ()),
        ("why is my query not using my index", QueryKind.NATURAL, ()),
    ],
)
def test_query_kind(query: str, kind: QueryKind, identifiers: tuple[str, ...]) -> None:
    built = build_text_query(query)
    assert built.kind is kind
    assert built.identifiers == identifiers


def test_same_input_same_output() -> None:
    query = 'pg_basebackup --wal-method=stream "exact phrase" or x'
    assert build_text_query(query) == build_text_query(query)


@pytest.mark.parametrize(
    ("query", "evidence"),
    [
        ("pg_ctl -m fast", Evidence.EXACT),
        ("--no-owner", Evidence.EXACT),
        ("why is my query not using my index", Evidence.ALL_TERMS),
    ],
)
def test_a_strict_match_is_identifier_evidence_only_when_the_query_names_one(query: str, evidence: Evidence) -> None:
    assert build_text_query(query).strict_evidence is evidence


@pytest.mark.parametrize("evidence", list(Evidence))
@pytest.mark.parametrize("rank", [0.0, 1e-9, 0.05, 0.6, 1.0, 37.0])
def test_banded_scores_carry_their_evidence_and_order_by_it_first(evidence: Evidence, rank: float) -> None:
    score = banded_score(evidence, rank)
    assert evidence_of(score) is evidence
    assert int(evidence) <= score < int(evidence) + 1
    if evidence < Evidence.EXACT:
        # the weakest match of a higher level beats the strongest of a lower one
        assert banded_score(Evidence(evidence + 1), 0.0) > score


def test_banded_score_is_monotonic_in_rank() -> None:
    ranks = [0.0, 0.01, 0.1, 0.5, 2.0, 10.0]
    scores = [banded_score(Evidence.ALL_TERMS, r) for r in ranks]
    assert scores == sorted(scores) and len(set(scores)) == len(scores)


@pytest.mark.parametrize(
    ("score", "evidence"),
    [(-1.0, Evidence.SOME_TERMS), (float("nan"), Evidence.SOME_TERMS), (9.5, Evidence.EXACT)],
)
def test_evidence_of_out_of_range_scores(score: float, evidence: Evidence) -> None:
    assert evidence_of(score) is evidence


@pytest.mark.parametrize(
    ("query", "phrase"),
    [
        # a pasted message or command: the whole query, word for word
        ("ERROR: could not serialize access", '"ERROR could not serialize access"'),
        ("REINDEX CONCURRENTLY", '"REINDEX CONCURRENTLY"'),
        ("database is not accepting commands", '"database is not accepting commands"'),
        # a question's words on a page are no quotation of it
        ("how do I make a column that auto-increments", ""),
        ("Why is my query slow", ""),
        ("replica lag keeps growing?", ""),
        # identifiers: the strict query is exact evidence already
        ("pg_ctl -m fast", ""),
        ("FATAL: no pg_hba.conf entry for host", ""),
        # one term is no phrase; the user's own syntax is left alone
        ("vacuum", ""),
        ('the "right" way', ""),
        ("char or varchar", ""),
        ("", ""),
    ],
)
def test_phrase_is_the_whole_query_for_queries_without_identifiers(query: str, phrase: str) -> None:
    assert build_text_query(query).phrase == phrase
