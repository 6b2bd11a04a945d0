"""Whether two titles are written in different languages, as the duplicate check's cross-language
stage needs to know (actors/duplicates/rules.py, `Contrast.cross_language`). Pure, no I/O, no model.

The titles are short, so no statistical language guesser is reliable on them; the rule is the
oldest one, written from the languages' grammar and spelling, not from the calibration pairs.
A title reads as other than English when it has

- a Portuguese or Spanish function word that English titles do not use ("para", "por", "la");
- a letter of Portuguese or Spanish spelling that no English word needs: "ã" and "õ" (the
  nasal vowels of "não", "-ção", "-ões"), "ñ" ("contraseña", "año") and "ç" ("preço",
  "serviço"). English borrows few words with them (façade, jalapeño, piñata) and mostly writes
  those without the mark (facade, jalapeno); none is backlog vocabulary. An English title that
  names "São Paulo" or a "jalapeño" is misread;
- two weak signs together (below), or
- a word written in another script than the Latin one (Cyrillic, Greek, Arabic, Han, Kana ...).

Weak signs, one alone says nothing: a word with an accent of Portuguese or Spanish ("á é í ó ú
â ê ô à", as in "relatório", "aplicación"), since English keeps the accents of many loanwords
("café", "résumé", "Pokémon", "Nestlé"); and the short function words an English title may carry
as tokens ("de" from "de-duplicate", "com" from "example.com", "en"/"es" as locale codes, "em"
the CSS unit). So "Relatório mensal em PDF" is Portuguese and "Café menu shows wrong prices" is
English; "al" and "sus" together are Spanish. "ü" is not a sign: in English text it comes from
German names ("Zürich"), and Spanish uses it in a handful of words ("pingüino"). Words that are
also English, or that English titles carry as tokens once normalised ("a", "no", "do", "as",
"o" and "e" from "I/O" and "e-mail", "son", "ate", "sem"), never count.

Only English / other is told among Latin-script titles: Portuguese and Spanish share cognates,
which the contrast stage can compare word for word, so a Portuguese–Spanish pair counts as one
language. A title in another script is in another language than any Latin-script title, and
than a title in a third script.
"""

from __future__ import annotations

import functools
import re
import unicodedata

TITLE_CACHE_SIZE = 4096
"""How many titles' readings (and the duplicate rules' words and numbers) are kept. A batch's
checks meet at most its own titles and their hits; 4,096 titles of ten words take a few MB a
cache, and even titles at the length limit stay within tens of MB."""

# The Portuguese and Spanish articles, prepositions (and their contractions), conjunctions and
# clitics, as folded words, by how much each says that a title is not English ("nas" is also
# network-attached storage, "lo" lo-fi, "le" French).
_PARTICLES_ALSO_ENGLISH = frozenset("a o e as no do nas lo le".split())
_WEAK_PARTICLES = frozenset("de em na com al sus en es con del se mi mis su un dos os y".split())
_STRONG_PARTICLES = frozenset(
    """da das nos ao aos pelo pela pelos pelas para por um uma uns umas que el la los las una unos
    unas""".split()
)

ROMANCE_PARTICLES = _PARTICLES_ALSO_ENGLISH | _WEAK_PARTICLES | _STRONG_PARTICLES
"""The function words of Portuguese and Spanish that say nothing of what a title is about: the
duplicate check's frame contrast leaves them out (actors/duplicates/rules.py, `STOPWORDS`)."""

ROMANCE_WORDS = _STRONG_PARTICLES | frozenset(
    """
    nao meu minha meus minhas seu sua seus suas nosso nossa este esta estes estas isso isto esse
    essa cada quando como onde mais muito muita ja tambem apos depois sobre entre desde durante ou
    deve devem ser estar sao foi pode podem tem
    muy tras hasta despues cuando donde esto eso estos esas ese esa nuestro nuestra tambien puede
    pueden debe deben fue antes
    """.split()
)
"""Function words (and a few auxiliaries) of Portuguese and Spanish that English titles do not
use, accents folded: one makes a title not English."""

WEAK_ROMANCE_WORDS = _WEAK_PARTICLES | {"sin"}
"""Portuguese and Spanish function words that an English title may carry as a token: one is a
weak sign. "sin" ("without") is one too, but not a particle of the frame contrast: like
"without" and "sem", it negates, so it is a slot's word, not the frame's."""

_STRONG_LETTERS = frozenset("ãõñç")
_ACCENTED_LETTERS = frozenset("áéíóúâêôà")

_NON_WORD = re.compile(r"[\W_]+")

# Japanese writes with Han ideographs and both kana: one script for telling languages apart.
_SAME_SCRIPT = {"HIRAGANA": "CJK", "KATAKANA": "CJK"}


def folded_words(title: str) -> list[str]:
    """A title's words, case and accents folded ("Relatório" -> "relatorio"), punctuation and
    underscores as separators; letters of every script are kept."""
    decomposed = unicodedata.normalize("NFKD", title.casefold())
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _NON_WORD.sub(" ", bare).split()


def _script(word: str) -> str | None:
    """The script of a word of at least two letters none of which is Latin; None otherwise (so a
    lone symbol such as "π" or "µs" in an English title is no sign)."""
    letters = [ch for ch in word if ch.isalpha()]
    if len(letters) < 2:
        return None
    scripts = {unicodedata.name(ch, "?").split(" ")[0] for ch in letters}
    if "LATIN" in scripts:
        return None
    first = sorted(scripts)[0]
    return _SAME_SCRIPT.get(first, first)


# Per title, not per pair: a check scores one title against each of its hits, and a batch's
# checks (with the calibration and the audit) meet the same titles again and again.
@functools.lru_cache(maxsize=TITLE_CACHE_SIZE)
def _reading(title: str) -> str:
    """How a title reads: "english", "latin" (Portuguese or Spanish) or the name of its other
    script."""
    composed = unicodedata.normalize("NFKC", title.casefold())
    words = _NON_WORD.sub(" ", composed).split()
    for word in words:
        script = _script(word)
        if script is not None:
            return script
    if any(ch in _STRONG_LETTERS for ch in composed):
        return "latin"
    folded = set(folded_words(title))
    if folded & ROMANCE_WORDS:
        return "latin"
    accented = {word for word in words if any(ch in _ACCENTED_LETTERS for ch in word)}
    return "latin" if len(accented) + len(folded & WEAK_ROMANCE_WORDS) >= 2 else "english"


def english(title: str) -> bool:
    """Whether a title reads as English (see the module's notes)."""
    return _reading(title) == "english"


def across_languages(a: str, b: str) -> bool:
    """The titles read as two languages: one English and the other not, or one in the Latin
    script and the other in another, or in two other scripts."""
    return _reading(a) != _reading(b)
