"""Cost of a provider call from the price catalogue (`[embedding] prices` in config)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal


@dataclass(frozen=True, slots=True)
class Priced:
    model: str | None
    """The model id for the usage row: None when the model is not in the catalogue."""
    cost_micros: int


def price(model: str, input_tokens: int, prices: Mapping[str, float]) -> Priced:
    """Cost in micro-units of `input_tokens` for `model`; `prices` is micro-units per 1,000 tokens.

    A model not in the catalogue costs 0 and gets no model id, so an unpriced row can never be
    mistaken for a free priced one. Rounded half up to whole micro-units (Decimal, so the same
    numbers always give the same cost).
    """
    if input_tokens < 0:
        raise ValueError("input_tokens must not be negative")
    per_thousand = prices.get(model)
    if per_thousand is None:
        return Priced(model=None, cost_micros=0)
    cost = Decimal(input_tokens) * Decimal(str(per_thousand)) / Decimal(1000)
    return Priced(model=model, cost_micros=int(cost.quantize(Decimal(1), rounding=ROUND_HALF_UP)))
