"""Value normalisation (actors/assignments/values.py): agreeing suppliers vote for one value."""

from __future__ import annotations

import pytest

from recalld.actors.assignments.values import normalise


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("230", "230"),
        ("  230 ", "230"),
        ("230.0", "230"),
        ("2,5", "2.5"),  # decimal comma
        ("2,50 V", "2.5 V"),
        ("1,500", "1,500"),  # a thousands separator or a decimal comma: left alone
        ("1.5 kW", "1500 W"),
        ("1,5 kW", "1500 W"),
        ("1500W", "1500 W"),
        ("1500 W", "1500 W"),
        ("10 mW", "0.01 W"),  # units keep their case: mW is not MW
        ("10 MW", "10000000 W"),
        ("1500 mm", "1.5 m"),
        ("150 cm", "1.5 m"),
        ("0.23 kV", "230 V"),
        ("5 %", "5 %"),  # an unknown unit is kept, the number normalised
        ("5.0 furlongs", "5 furlongs"),
        ("-0.0", "0"),
        (".5 W", "0.5 W"),
        ("Red", "red"),  # words are case-folded
        ("Crimson   RED", "crimson red"),
        ("AB-12c", "AB-12c"),  # codes keep their case
        ("x 12", "x 12"),
        ("", ""),
    ],
)
def test_normalised_value(raw: str, value: str) -> None:
    got = normalise(raw)
    assert got.value == value
    assert got.raw == raw  # the raw value is kept beside it


@pytest.mark.parametrize(
    "same",
    [
        ("1.5 kW", "1500 W", "1,5 kW", " 1500  W "),
        ("1.2 m", "120 cm", "1200 mm", "1,2 m"),
        ("230 V", "0.23 kV", "230,0 V"),
        ("Red", "red", " RED "),
    ],
)
def test_agreeing_suppliers_vote_for_one_value(same: tuple[str, ...]) -> None:
    assert len({normalise(v).value for v in same}) == 1


@pytest.mark.parametrize("different", [("1 mW", "1 MW"), ("1 m", "1 mm"), ("1 W", "1 V"), ("AB-1", "ab-1")])
def test_different_values_stay_different(different: tuple[str, ...]) -> None:
    assert len({normalise(v).value for v in different}) == len(different)


SERIAL = "1234567890123456789012345678901"  # 31 digits: more than Decimal's default 28


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (SERIAL, SERIAL),
        ("1234567890123456789012345678902", "1234567890123456789012345678902"),
        (f"{SERIAL} V", f"{SERIAL} V"),
        (f"{SERIAL}V", f"{SERIAL} V"),
        (f"{SERIAL} kW", f"{SERIAL}000 W"),
        (f"{SERIAL} mW", "1234567890123456789012345678.901 W"),
        (f"{SERIAL}.000", SERIAL),  # insignificant zeros still go
        (f"0.{SERIAL}", f"0.{SERIAL}"),
        (f"{SERIAL},5", f"{SERIAL}.5"),
        ("9" * 200 + " GHz", "9" * 200 + "000000000 Hz"),
        (f"{SERIAL} furlongs", f"{SERIAL} furlongs"),
    ],
)
def test_long_numbers_are_normalised_exactly(raw: str, value: str) -> None:
    assert normalise(raw).value == value


@pytest.mark.parametrize(
    "different",
    [
        (SERIAL, "1234567890123456789012345678902"),
        (f"{SERIAL} V", "1234567890123456789012345678902 V"),
        (f"{SERIAL} kW", "1234567890123456789012345678902 kW"),
        (f"0.{SERIAL}", "0.1234567890123456789012345678902"),
    ],
)
def test_long_numbers_that_differ_in_their_last_digit_stay_different(different: tuple[str, ...]) -> None:
    assert len({normalise(v).value for v in different}) == len(different)
