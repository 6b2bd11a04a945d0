"""Value normalisation before voting, so that suppliers who agree do not look like a dispute.

Pure: `normalise("1,5 kW")` is `Normalised(raw="1,5 kW", value="1500 W")`. Only rewrites that
cannot change meaning are made:

- whitespace: trimmed, runs collapsed to one space;
- a decimal comma (`1,5`) becomes a point, but not `1,500`, which may be a thousands separator;
- numbers lose insignificant zeros (`230.0` is `230`);
- a number with a unit of a known dimension is expressed in the dimension's base unit
  (W, m, V, ...); units keep their case, since `mW` and `MW` differ by a factor of 10^9;
- every digit is kept: the arithmetic runs in a decimal context as precise as the number
  itself, so two 31-digit serials that differ in their last digit stay two values (Decimal's
  default context would round both to 28 digits and make them one value nobody sent); a
  rewrite that could not be exact leaves the value as written;
- words (letters and spaces only) are case-folded: `Red` and `red` name one colour; a code with
  digits or punctuation (`AB-12c`) keeps its case.

The raw value is always kept beside the normalised one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow, Rounded

# unit -> (base unit, factor). One table per dimension, so only like units ever compare.
UNITS: dict[str, tuple[str, Decimal]] = {
    **{u: ("W", Decimal(f)) for u, f in (("mW", "0.001"), ("W", "1"), ("kW", "1000"), ("MW", "1000000"))},
    **{u: ("m", Decimal(f)) for u, f in (("mm", "0.001"), ("cm", "0.01"), ("dm", "0.1"), ("m", "1"), ("km", "1000"))},
    **{u: ("V", Decimal(f)) for u, f in (("mV", "0.001"), ("V", "1"), ("kV", "1000"))},
    **{u: ("A", Decimal(f)) for u, f in (("mA", "0.001"), ("A", "1"))},
    **{u: ("g", Decimal(f)) for u, f in (("mg", "0.001"), ("g", "1"), ("kg", "1000"))},
    **{u: ("Hz", Decimal(f)) for u, f in (("Hz", "1"), ("kHz", "1000"), ("MHz", "1000000"), ("GHz", "1000000000"))},
}

_NUMBER = re.compile(r"^(?P<num>[+-]?(?:\d+(?:[.,]\d+)?|[.,]\d+))\s*(?P<unit>[^\d\s.,+-][^\s]*)?$")
_WORDS = re.compile(r"^[^\W\d_]+(?: [^\W\d_]+)*$")


@dataclass(frozen=True, slots=True)
class Normalised:
    raw: str
    value: str


def _number(text: str) -> Decimal | None:
    """`text` as a decimal number, reading a comma as the decimal point only where that is the
    one sensible reading (not `1,500`)."""
    if "," in text:
        _, _, decimals = text.partition(",")
        if len(decimals) == 3:
            return None  # 1,500: one and a half, or fifteen hundred
        text = text.replace(",", ".")
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def _exact(*numbers: Decimal) -> Context:
    """A context in which multiplying `numbers` and normalising the product is exact: a product's
    coefficient has at most as many digits as its factors' together. Any rounding traps, so a
    result that is not exact is an exception rather than a different number."""
    digits = sum(len(n.as_tuple().digits) for n in numbers)
    return Context(prec=max(digits, 1), traps=[Inexact, Rounded, InvalidOperation, Overflow])


def _plain(number: Decimal, factor: Decimal = Decimal(1)) -> str:
    """`number * factor` without exponent or insignificant zeros, every digit kept:
    1.50 -> 1.5, 1E+3 -> 1000, -0 -> 0. `ArithmeticError` where that cannot be exact."""
    exact = _exact(number, factor)
    scaled = exact.multiply(number, factor)
    if scaled == 0:
        return "0"
    return format(exact.normalize(scaled), "f")


def normalise(raw: str) -> Normalised:
    """The voting form of `raw`; see the module docstring for what is rewritten."""
    text = " ".join(raw.split())
    match = _NUMBER.match(text)
    if match is not None:
        number = _number(match.group("num"))
        unit = match.group("unit")
        if number is not None:
            try:
                if unit is None:
                    return Normalised(raw, _plain(number))
                if unit in UNITS:
                    base, factor = UNITS[unit]
                    return Normalised(raw, f"{_plain(number, factor)} {base}")
                return Normalised(raw, f"{_plain(number)} {unit}")
            except ArithmeticError:
                return Normalised(raw, text)  # not exactly rewritable: as written
    if _WORDS.match(text):
        return Normalised(raw, text.casefold())
    return Normalised(raw, text)
