"""What the resolver asks an OpenAI-compatible chat endpoint, and how it reads the answer.

Pure. The question carries the entity, the characteristic, its unit and the candidates (the
normalised value, the values as the suppliers wrote them, the suppliers and their summed trust),
never any other text. The request asks for `{"selected_value", "confidence"}` through
`response_format` with a JSON schema whose `selected_value` is an enum of the candidates; a
server that refuses or ignores it still gets the same instruction in the prompt, and the answer
is parsed as plain JSON (code fences and text around the object tolerated). How the request is
shaped for each server, and how a refusal is read, is `recalld.actors.assignments.dialect`.

Confidence: where the answer carries logprobs, the probability of the chosen option (the
product of its tokens' probabilities) is used rather than the number the model wrote, which
small models calibrate poorly; where it carries none (a server that ignores `logprobs`, or a
reasoning model that refuses it) the model's own number is. `Verdict.confidence_source` says
which was used.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from recalld.actors.assignments.disputes import Tier, tier


class ResolverReason(StrEnum):
    """Why the resolver did not apply an answer (stored on the dispute, labels of metrics)."""

    LOW_CONFIDENCE = "low_confidence"
    UNPARSEABLE_ANSWER = "unparseable_answer"
    OUT_OF_CANDIDATES = "out_of_candidates"
    LLM_TIMEOUT = "llm_timeout"
    LLM_ERROR = "llm_error"
    """The endpoint answered an HTTP error, or could not be reached."""
    LLM_CIRCUIT_OPEN = "llm_circuit_open"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    STALE_ANSWER = "stale_answer"
    """The observations changed while the dispute was asked or moderated: the answer is recorded
    on it, never applied, and the dispute is superseded (a refused approve's error code too)."""


class ConfidenceSource(StrEnum):
    MODEL = "model"
    """The number the model wrote."""
    LOGPROBS = "logprobs"
    """The probability of the chosen option's tokens."""


@dataclass(frozen=True, slots=True)
class Option:
    value: str
    """The normalised value: what the answer must select."""
    raws: tuple[str, ...]
    """The value as its suppliers wrote it (`1,5 kW`, `1500 W`): context a normalised form loses."""
    suppliers: tuple[str, ...]
    trust: float


@dataclass(frozen=True, slots=True)
class Question:
    entity: str
    characteristic: str
    unit: str | None
    options: tuple[Option, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    selected_value: str
    confidence: float
    confidence_source: ConfidenceSource
    model_confidence: float | None
    """What the model wrote, kept beside a logprob-derived confidence for comparison."""

    @property
    def tier(self) -> Tier:
        return tier(self.confidence)


class Unusable(Exception):
    """The answer cannot be applied; `reason` says why."""

    def __init__(self, reason: ResolverReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


SYSTEM_PROMPT = (
    "You choose the correct value of a product characteristic when suppliers disagree. "
    "Each candidate is a normalised value with the values as its suppliers wrote them. "
    'Answer only with a JSON object {"selected_value": <one of the candidate values, verbatim>, '
    '"confidence": <a number from 0 to 1>}.'
)


def unit_of(values: Sequence[str]) -> str | None:
    """The unit every candidate shares after normalisation (`1500 W` -> `W`), or None."""
    units = {v.rpartition(" ")[2] if " " in v else None for v in values}
    only = units.pop() if len(units) == 1 else None
    return only if only and not only[0].isdigit() else None


def messages(question: Question) -> list[dict[str, str]]:
    context = {
        "entity": question.entity,
        "characteristic": question.characteristic,
        "unit": question.unit,
        "candidates": [
            {
                "value": o.value,
                "as_written": list(o.raws),
                "suppliers": list(o.suppliers),
                "supplier_trust": round(o.trust, 6),
            }
            for o in question.options
        ],
    }
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": json.dumps(context, ensure_ascii=False)},
    ]


def response_format(question: Question) -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "dispute_verdict",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "selected_value": {"type": "string", "enum": [o.value for o in question.options]},
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                },
                "required": ["selected_value", "confidence"],
                "additionalProperties": False,
            },
        },
    }


def _object(content: str) -> Mapping[str, Any]:
    """The JSON object in `content`: the whole text, or the first `{...}` in it."""
    try:
        found = json.loads(content)
    except ValueError:
        match = re.search(r"\{.*\}", content, re.DOTALL)
        if match is None:
            raise Unusable(ResolverReason.UNPARSEABLE_ANSWER, "the answer holds no JSON object") from None
        try:
            found = json.loads(match.group(0))
        except ValueError:
            raise Unusable(ResolverReason.UNPARSEABLE_ANSWER, "the answer's JSON does not parse") from None
    if not isinstance(found, dict):
        raise Unusable(ResolverReason.UNPARSEABLE_ANSWER, "the answer is JSON but not an object")
    return found


def option_probability(tokens: Sequence[Mapping[str, Any]], value: str) -> float | None:
    """The probability of `value` as the answer's `selected_value`: exp of the summed logprobs
    of the tokens that spell it. None when the tokens do not show it."""
    try:
        pieces = [(str(t["token"]), float(t["logprob"])) for t in tokens]
    except (KeyError, TypeError, ValueError):
        return None
    text = "".join(p for p, _ in pieces)
    encoded = json.dumps(value, ensure_ascii=False)[1:-1]
    match = re.search(r'"selected_value"\s*:\s*"', text)
    if match is None or not text.startswith(encoded, match.end()) or not encoded:
        return None
    start, end = match.end(), match.end() + len(encoded)
    total, at = 0.0, 0
    for piece, logprob in pieces:
        if at < end and at + len(piece) > start:
            total += logprob
        at += len(piece)
    return min(1.0, math.exp(total))


def read_answer(body: Any, question: Question) -> Verdict:
    """The verdict in a `chat/completions` answer, or `Unusable`."""
    try:
        choice = body["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise Unusable(ResolverReason.UNPARSEABLE_ANSWER, "no choices[0].message.content") from None
    if not isinstance(content, str):
        raise Unusable(ResolverReason.UNPARSEABLE_ANSWER, "the message content is not text")
    answer = _object(content)
    selected = answer.get("selected_value")
    if not isinstance(selected, str):
        raise Unusable(ResolverReason.UNPARSEABLE_ANSWER, "selected_value is missing or not a string")
    if selected not in {o.value for o in question.options}:
        raise Unusable(ResolverReason.OUT_OF_CANDIDATES, f"{selected[:80]!r} is none of the candidates")
    written = answer.get("confidence")
    model_confidence = (
        float(written)
        if isinstance(written, (int, float)) and not isinstance(written, bool) and 0 <= written <= 1
        else None
    )
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
    derived = option_probability(tokens, selected) if isinstance(tokens, list) else None
    if derived is not None:
        return Verdict(selected, derived, ConfidenceSource.LOGPROBS, model_confidence)
    if model_confidence is None:
        raise Unusable(ResolverReason.UNPARSEABLE_ANSWER, "confidence is missing or not a number in [0, 1]")
    return Verdict(selected, model_confidence, ConfidenceSource.MODEL, model_confidence)
