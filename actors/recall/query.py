"""How a user's query becomes full-text search input. Pure: no I/O.

PostgreSQL's `websearch_to_tsquery` reads a query the way a web search box does: a leading `-`
negates a word, `"..."` is a phrase, `or` is OR, everything else is ANDed. Queries sent to
recalld are questions and identifiers typed as-is, where that syntax misfires:

- `pg_ctl -m fast`, `tar --strip-components`: a leading dash is an option, not a NOT (a negated
  term also forces a scan the GIN index cannot serve);
- `--wal-method=stream`: `=` glues the value into the option's phrase, which the page (that
  writes `--wal-method=method`, and `stream` elsewhere) never contains;
- `ERRCODE 23505 unique_violation`: one word the page lacks makes the AND match nothing.

`build_text_query` returns a `TextQuery`: a `strict` string (every term required, as before,
minus those misreadings), a `loose` string (any term; pages holding more of them rank higher)
for when the strict one finds too little, and for queries without identifiers a `phrase` string
(the whole query word for word, e.g. a pasted error message). All are websearch syntax, which
never raises a syntax error whatever the input, and all keep identifiers whole: `pg_ctl`,
`max_wal_size` or `strip-components` stay phrases, so they match only where the words are adjacent.

What a full-text match is worth depends on what matched (`Evidence`): every identifier of the
query, or the whole query word for word, is near-certain evidence (embeddings read `--no-owner`
or `23505` poorly, the text says it verbatim); every word of a question is weak evidence on long
pages; some words weaker still. The full-text route carries the level in its score
(`banded_score`), so fusion can weigh it (`evidence_of`) without seeing the query.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass
from enum import IntEnum, StrEnum

QUERY_BUILDER_VERSION = 4
"""Bump when the strings built for a given query change (it changes what full-text finds).
v2: backslash commands (`\\gexec`, `\\copy`) are identifiers.
v3: PascalCase names of three or more parts (`ServerAliveInterval`) are identifiers; a number is
one only when shaped like a code (`23505`, `42P01`) or when it is the whole query: in a sentence
("files bigger than 100 megabytes") it is a quantity.
v4: `or` joins the words on either side of it (`create or update a function`: either verb, and
the rest), not everything before it with everything after, as websearch reads it."""


class QueryKind(StrEnum):
    IDENTIFIER = "identifier"
    """At least one token looks like an option, setting, function, error code or file name."""
    NATURAL = "natural"
    """Words only: a question or phrase in a user's words."""


class Evidence(IntEnum):
    """What a full-text match holds of the query, weakest first; the integer part of its score."""

    SOME_TERMS = 0
    """Found by the loose query: at least one term."""
    ALL_TERMS = 1
    """Found by the strict query of a query that names no identifier: every word."""
    EXACT = 2
    """Every term of a query that names identifiers (the strict query), or the whole query word
    for word (the phrase query): what was asked, as it was typed."""

    @property
    def key(self) -> str:
        """The name config uses for this level (`exact`, `all_terms`, `some_terms`)."""
        return self.name.lower()


def banded_score(evidence: Evidence, rank: float) -> float:
    """A full-text score: the evidence level plus `rank / (rank + 1)` (in [0, 1) for a ts_rank
    >= 0), so scores order by evidence first, then by rank, and `evidence_of` reads the level back.
    This is what `ts_rank(..., 32)` (normalisation flag 32) plus the level computes in SQL."""
    return int(evidence) + (rank / (rank + 1) if rank > 0 else 0.0)


def evidence_of(score: float) -> Evidence:
    """The evidence level of a `banded_score` (levels above the highest read as the highest)."""
    if not math.isfinite(score) or score < 1:
        return Evidence.SOME_TERMS
    return Evidence(min(int(score), int(max(Evidence))))


@dataclass(frozen=True, slots=True)
class TextQuery:
    strict: str
    """websearch_to_tsquery input: every term required (of `a or b`, one); user phrases ("...") kept."""
    loose: str
    """websearch_to_tsquery input: the same terms joined by `or` (any term matches)."""
    phrase: str
    """websearch_to_tsquery input: every term, in order, as one phrase; empty for a query that
    names identifiers (`strict` is exact evidence already), reads as a question (a question's
    words on a page are no quotation of it), has fewer than two terms, or uses websearch syntax
    of its own (quotes, `or`)."""
    identifiers: tuple[str, ...]
    """The tokens recognised as identifiers, as they are searched (dashes stripped, `=` split)."""
    kind: QueryKind

    @property
    def empty(self) -> bool:
        """Nothing searchable was left (the query was blank or punctuation only)."""
        return not self.strict

    @property
    def strict_evidence(self) -> Evidence:
        """What a record matching `strict` holds."""
        return Evidence.EXACT if self.identifiers else Evidence.ALL_TERMS


# A quoted phrase or a run of non-space characters.
_TOKEN = re.compile(r'"([^"]*)"|(\S+)')
# Punctuation around a token that is sentence syntax, not part of the identifier.
_EDGE_OPEN = "\"'`([{<"
_EDGE_CLOSE = "\"'`)]}>,;:!?."
# A dash is kept only inside a hyphenated word (`strip-components`): anywhere else the parser
# starts a new word after it, and websearch reads `-word` as NOT word (`<->`, `--x`, `(-m)`).
_UNJOINING_DASH = re.compile(r"(?<!\w)-|-(?!\w)")
_SPLITTERS = re.compile(r"[=()]")
# Identifier shapes, tried on the token with its surrounding punctuation removed.
_OPTION = re.compile(r"^--?[A-Za-z0-9][\w.-]*(=\S*)?$")
_SNAKE = re.compile(r"^\w+_\w+")  # max_wal_size, pg_dump, unique_violation
_DOTTED = re.compile(r"^(?=.*\w\w)[A-Za-z_]\w*(\.\w+)+$")  # pg_hba.conf, pg_stat_statements.track; not e.g.
_CALL = re.compile(r"^[A-Za-z_][\w.]*\(.*\)$")  # gen_random_uuid(), now()
_ASSIGNMENT = re.compile(r"^[A-Za-z_][\w.-]*=\S*$")  # work_mem=64MB
_CODE = re.compile(r"^(?=[0-9A-Z]*[0-9])[0-9A-Z]{5}$")  # SQLSTATE 23505, 42P01, 0A000
_NUMBER = re.compile(r"^[0-9]{3,}$")  # a port, status or error number when it is the whole query
_CAMEL = re.compile(r"^[a-z]+[A-Z]\w*$")  # maxConnections
# ServerAliveInterval, StrictHostKeyChecking; not PostgreSQL, JavaScript or a capitalised word
_PASCAL = re.compile(r"^[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+){2,}$")
_COMMAND = re.compile(r"^\\[A-Za-z]\w*[+]?$")  # psql meta-commands: \gexec, \copy, \dt+
_OR = "or"
# `a or b` choices multiply: past this many readings, websearch's own reading is kept.
MAX_READINGS = 8
# A query that opens with one of these, or ends with "?", is a question, not pasted text.
_QUESTION_WORDS = frozenset("how why what when where which who whom whose can should is are does do did".split())


def _strip_edges(token: str) -> str:
    start, end = 0, len(token)
    while start < end and token[start] in _EDGE_OPEN:
        start += 1
    while end > start and token[end - 1] in _EDGE_CLOSE:
        # keep the closing parenthesis of a call: `now()`
        if token[end - 1] == ")" and "(" in token[start:end]:
            break
        end -= 1
    return token[start:end]


def is_identifier(token: str) -> bool:
    """Whether one whitespace-free token looks like an identifier rather than a word.

    Options (`-m`, `--no-owner`, `--wal-method=stream`), snake_case names, dotted names
    (`pg_hba.conf`), calls (`now()`), assignments (`work_mem=64MB`), error codes (`23505`,
    `42P01`), camelCase, PascalCase of three parts or more (`ServerAliveInterval`) and backslash
    commands (`\\gexec`). Plain words, capitalised or not, and plain numbers are not identifiers.
    """
    bare = _strip_edges(token)
    if not bare:
        return False
    return any(
        shape.match(bare) for shape in (_OPTION, _SNAKE, _DOTTED, _CALL, _ASSIGNMENT, _CODE, _CAMEL, _PASCAL, _COMMAND)
    ) and any(ch.isalnum() for ch in bare)


def _terms_of(token: str) -> list[str]:
    """What one raw token searches for: `=` and parentheses split it, a dash that does not join
    two word characters is dropped (websearch would read one that starts a word as NOT), quotes
    go. A token of punctuation alone gives nothing."""
    bare = _UNJOINING_DASH.sub(" ", _SPLITTERS.sub(" ", _strip_edges(token)))
    terms = []
    for piece in bare.split():
        piece = _strip_edges(piece).replace('"', "")
        if any(ch.isalnum() for ch in piece):
            terms.append(piece)
    return terms


def _strict(slots: list[list[str]], max_readings: int) -> str:
    """Every slot required, one of its choices each, in websearch syntax: it has no parentheses,
    so `(a or b) c` is written out as `a c or b c` (websearch binds AND tighter than OR). Past
    `max_readings` choices, `a or b c` as websearch reads it: a, or b and c."""
    if math.prod(len(slot) for slot in slots) > max_readings:
        return " ".join(f" {_OR} ".join(slot) for slot in slots)
    return f" {_OR} ".join(" ".join(reading) for reading in itertools.product(*slots))


def build_text_query(query: str, *, max_readings: int = MAX_READINGS) -> TextQuery:
    """The full-text inputs for `query` (see the module docstring). Same input, same output.
    `max_readings=1` keeps websearch's own reading of `or` (bench/fulltext.py compares them).

    Guarantees: no term of `strict`, `loose` or `phrase` starts with `-` (nothing is negated);
    `=` never joins two terms; a balanced `"..."` phrase stays a phrase in `strict` and one
    alternative in `loose`; the word `or` makes the terms on either side of it alternatives in
    `strict` (`create or update a function`: a record holding `function` and either verb) and is
    no term of its own in `loose`.
    """
    # Every slot is required; a slot holds alternatives (`or`), each a token's terms (all required).
    slots: list[list[str]] = []
    alternatives: list[str] = []
    identifiers: list[str] = []
    syntax = False  # the user wrote a phrase or an OR: no phrase of our own
    joining = False  # an `or` came since the last slot: the next token joins it
    text = query if query.count('"') % 2 == 0 else query.replace('"', " ")
    lone = len(text.split()) == 1

    def add(choice: str) -> None:
        nonlocal joining
        if joining and choice not in slots[-1]:
            slots[-1].append(choice)
        elif not joining:
            slots.append([choice])
        joining = False

    for match in _TOKEN.finditer(text):
        phrase, token = match.group(1), match.group(2)
        if phrase is not None:
            words = [t for raw in phrase.split() for t in _terms_of(raw)]
            if words:
                quoted = '"' + " ".join(words) + '"'
                add(quoted)
                alternatives.append(quoted)
                syntax = True
            continue
        if token.lower() == _OR:
            if slots:  # a leading `or` joins nothing
                joining = syntax = True
            continue
        terms = _terms_of(token)
        if not terms:
            continue
        if is_identifier(token) or (lone and _NUMBER.match(_strip_edges(token))):
            identifiers.extend(terms)
        add(" ".join(terms))
        alternatives.extend(terms)
    unique_alternatives = list(dict.fromkeys(alternatives))
    first = _strip_edges(query.split()[0]).lower() if query.split() else ""
    question = first in _QUESTION_WORDS or query.rstrip().endswith("?")
    words = [choice for slot in slots for choice in slot]
    whole = not identifiers and not syntax and not question and len(" ".join(words).split()) >= 2
    return TextQuery(
        strict=_strict(slots, max_readings) if slots else "",
        loose=f" {_OR} ".join(unique_alternatives),
        phrase='"' + " ".join(words) + '"' if whole else "",
        identifiers=tuple(dict.fromkeys(identifiers)),
        kind=QueryKind.IDENTIFIER if identifiers else QueryKind.NATURAL,
    )
