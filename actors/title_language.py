"""Whether two titles are written in different languages, as the duplicate check's cross-language
stage needs to know (actors/duplicates.py, `Contrast.cross_language`). Pure, no I/O, no model.

The titles are short, so no statistical language guesser is reliable on them; the rule is the
oldest one: Portuguese and Spanish titles carry their function words ("para", "por", "con",
"la") or letters with diacritics ("relatório", "aplicación"), and English titles carry neither.
Only the split English / other is made: Portuguese and Spanish share cognates, which the
contrast stage can compare word for word, so a Portuguese–Spanish pair counts as one language.

Words that are also English, or that English titles carry as tokens once normalised ("a",
"no", "do", "as", "o" and "e" from "I/O" and "e-mail", "son", "ate", "sem"), never count. Short
words that are mostly Portuguese or Spanish but may appear in an English title ("de" from
"de-duplicate", "com" from "example.com", "en"/"es" as locale codes, "em" the CSS unit) count
only two together ("por favor" would be one strong word; "al" and "sus" two weak ones).
"""

from __future__ import annotations

import re
import unicodedata

ROMANCE_WORDS = frozenset(
    """
    da das nos ao aos pelo pela pelos pelas para por um uma uns umas nao que meu minha meus minhas
    seu sua seus suas nosso nossa este esta estes estas isso isto esse essa cada quando como onde
    mais muito muita ja tambem apos depois sobre entre desde durante ou deve devem ser estar sao
    foi pode podem tem
    el la los las una unos unas muy tras hasta despues cuando donde esto eso estos esas ese esa
    nuestro nuestra tambien puede pueden debe deben fue antes
    """.split()
)
"""Function words (and a few auxiliaries) of Portuguese and Spanish that English titles do not
use, accents folded; written from the languages' grammar, not from the calibration pairs."""

WEAK_ROMANCE_WORDS = frozenset("de em na com al sus en es con del sin se mi mis su un dos os y".split())
"""Portuguese and Spanish function words that an English title may carry as a token; a title
needs two of them (different ones) to read as other than English."""


def _folded_words(title: str) -> list[str]:
    decomposed = unicodedata.normalize("NFKD", title.casefold())
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return re.sub(r"[\W_]+", " ", bare).split()


def english(title: str) -> bool:
    """Whether a title reads as English: no letter with a diacritic and no Portuguese or
    Spanish function word (see the module's notes)."""
    if any(unicodedata.combining(ch) for ch in unicodedata.normalize("NFKD", title)):
        return False
    words = set(_folded_words(title))
    return not words & ROMANCE_WORDS and len(words & WEAK_ROMANCE_WORDS) < 2


def across_languages(a: str, b: str) -> bool:
    """One title reads as English and the other does not."""
    return english(a) != english(b)
