"""Reading the resolver's answer (actors/assignments/verdict.py): JSON, fallbacks, logprob confidence."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from recalld.actors.assignments.disputes import Tier
from recalld.actors.assignments.verdict import (
    ConfidenceSource,
    Option,
    Question,
    ResolverReason,
    Unusable,
    messages,
    read_answer,
    response_format,
    unit_of,
)

Q = Question(
    "plug-1", "voltage", "V", (Option("230 V", ("230",), ("acme",), 0.5), Option("220 V", ("220 V",), ("globex",), 0.5))
)


def answer(content: str, logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": content}}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"choices": [choice]}


def tokens(*pieces: tuple[str, float]) -> list[dict[str, Any]]:
    return [{"token": t, "logprob": lp, "top_logprobs": []} for t, lp in pieces]


@pytest.mark.parametrize(
    ("content", "value", "confidence", "level"),
    [
        ('{"selected_value": "230 V", "confidence": 0.93}', "230 V", 0.93, Tier.HIGH),
        ('{"selected_value": "220 V", "confidence": 0.6}', "220 V", 0.6, Tier.MEDIUM),
        ('{"selected_value": "220 V", "confidence": 0.2}', "220 V", 0.2, Tier.LOW),
        ('{"selected_value": "230 V", "confidence": 1}', "230 V", 1.0, Tier.HIGH),
        # a server that ignores response_format: fences and words around the object
        ('```json\n{"selected_value": "230 V", "confidence": 0.81}\n```', "230 V", 0.81, Tier.HIGH),
        ('Sure! {"selected_value": "220 V", "confidence": 0.55} Hope it helps.', "220 V", 0.55, Tier.MEDIUM),
    ],
)
def test_a_usable_answer(content: str, value: str, confidence: float, level: Tier) -> None:
    verdict = read_answer(answer(content), Q)
    assert (verdict.selected_value, verdict.confidence, verdict.tier) == (value, confidence, level)
    assert verdict.confidence_source is ConfidenceSource.MODEL


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (answer("I think 230."), ResolverReason.UNPARSEABLE_ANSWER),
        (answer("{not json}"), ResolverReason.UNPARSEABLE_ANSWER),
        (answer("[1, 2]"), ResolverReason.UNPARSEABLE_ANSWER),
        (answer('{"selected_value": 230, "confidence": 0.9}'), ResolverReason.UNPARSEABLE_ANSWER),
        (answer('{"selected_value": "230 V"}'), ResolverReason.UNPARSEABLE_ANSWER),
        (answer('{"selected_value": "230 V", "confidence": 7}'), ResolverReason.UNPARSEABLE_ANSWER),
        (answer('{"selected_value": "230 V", "confidence": true}'), ResolverReason.UNPARSEABLE_ANSWER),
        (answer('{"selected_value": "240 V", "confidence": 0.99}'), ResolverReason.OUT_OF_CANDIDATES),
        ({"choices": []}, ResolverReason.UNPARSEABLE_ANSWER),
        ({"error": "x"}, ResolverReason.UNPARSEABLE_ANSWER),
        ("not even an object", ResolverReason.UNPARSEABLE_ANSWER),
        (answer(None), ResolverReason.UNPARSEABLE_ANSWER),  # type: ignore[arg-type]
    ],
)
def test_an_unusable_answer(body: Any, reason: ResolverReason) -> None:
    with pytest.raises(Unusable) as refused:
        read_answer(body, Q)
    assert refused.value.reason is reason


def test_logprobs_give_the_confidence_of_the_chosen_option() -> None:
    content = '{"selected_value": "230 V", "confidence": 0.99}'
    pieces = tokens(
        ('{"', 0.0),
        ("selected", 0.0),
        ('_value": "', 0.0),
        ("230", math.log(0.6)),
        (" V", math.log(0.5)),
        ('", "confidence": 0.99}', -3.0),
    )
    assert "".join(t["token"] for t in pieces) == content
    verdict = read_answer(answer(content, pieces), Q)
    assert verdict.confidence == pytest.approx(0.3)
    assert verdict.confidence_source is ConfidenceSource.LOGPROBS
    assert verdict.model_confidence == 0.99  # kept beside it
    assert verdict.tier is Tier.LOW


def test_logprobs_that_do_not_spell_the_answer_fall_back_to_the_model_number() -> None:
    content = '{"selected_value": "230 V", "confidence": 0.9}'
    verdict = read_answer(answer(content, tokens(("something else", -1.0))), Q)
    assert (verdict.confidence, verdict.confidence_source) == (0.9, ConfidenceSource.MODEL)


def test_logprobs_stand_in_for_a_missing_confidence() -> None:
    content = '{"selected_value": "220 V"}'
    pieces = tokens(('{"selected_value": "', 0.0), ("220 V", math.log(0.85)), ('"}', 0.0))
    verdict = read_answer(answer(content, pieces), Q)
    assert verdict.confidence == pytest.approx(0.85)
    assert verdict.model_confidence is None


def test_the_request_names_the_entity_characteristic_unit_and_candidates_as_written() -> None:
    sent = json.loads(messages(Q)[1]["content"])
    assert sent == {
        "entity": "plug-1",
        "characteristic": "voltage",
        "unit": "V",
        "candidates": [
            {"value": "230 V", "as_written": ["230"], "suppliers": ["acme"], "supplier_trust": 0.5},
            {"value": "220 V", "as_written": ["220 V"], "suppliers": ["globex"], "supplier_trust": 0.5},
        ],
    }
    schema = response_format(Q)["json_schema"]["schema"]
    assert schema["properties"]["selected_value"]["enum"] == ["230 V", "220 V"]


@pytest.mark.parametrize(
    ("values", "unit"), [(["230 V", "220 V"], "V"), (["230", "220"], None), (["1 W", "1 m"], None), (["red"], None)]
)
def test_unit_of(values: list[str], unit: str | None) -> None:
    assert unit_of(values) == unit
