"""The offline fusion sweep's grid: every fusion setting tried on the same route lists, how each
fuses one question's lists, and the rule a setting is chosen by on the tuning questions."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.lib.golden import KINDS
from bench.lib.pgvector import PGVECTOR_TOP
from bench.lib.routes import Lists
from recalld.actors.recall.fusion import Fused, reciprocal_rank, settle_ties, weighted_score
from recalld.actors.recall.metrics import Score
from recalld.actors.recall.query import Evidence, evidence_of


@dataclass(frozen=True)
class Setting:
    """One fusion setting of the sweep: a label and how it fuses one question's route lists."""

    label: str
    fuse: Callable[[list[tuple[uuid.UUID, float]], list[tuple[uuid.UUID, float]]], list[Fused[uuid.UUID]]]
    config: dict[str, Any]
    """The [recall] keys that select this setting in the daemon."""
    words_override: bool = False
    """Whether a words-only full-text match (all_terms, some_terms) can on its own lift a record
    above the vector route's first answer: then a paraphrase that shares one common word with
    another record loses its answer (paraphrases must be found by fusion too)."""


EVIDENCE = tuple(e.key for e in sorted(Evidence, reverse=True))
"""exact, all_terms, some_terms: the keys of [recall] fts_evidence_weights."""


def _factors(text: list[tuple[uuid.UUID, float]], evidence_weights: dict[str, float]) -> list[float]:
    return [evidence_weights[evidence_of(score).key] for _, score in text]


def rrf_setting(k: float, evidence_weights: dict[str, float], depth: int | None = None) -> Setting:
    def fuse(text: list[tuple[uuid.UUID, float]], vec: list[tuple[uuid.UUID, float]]) -> list[Fused[uuid.UUID]]:
        factors = {"fts": _factors(text, evidence_weights)}
        return reciprocal_rank({"fts": text, "vector": vec}, k=k, factors=factors, depth=depth)

    label = f"rrf k={k:g} evidence " + "/".join(f"{evidence_weights[e]:g}" for e in EVIDENCE)
    config: dict[str, Any] = {"fusion": "rrf", "rrf_k": k, "fts_evidence_weights": evidence_weights}
    if depth:
        label += f" depth={depth}"
        config = {"offline only": f"depth {depth}"}
    # full text's first adds w / (k + 1); the vector route's first leads its second by
    # 1 / (k + 1) - 1 / (k + 2), which is 1 / (k + 2) of the first's share
    words = max(evidence_weights["all_terms"], evidence_weights["some_terms"])
    return Setting(label, fuse, config, words_override=words >= 1 / (k + 2))


def weighted_setting(evidence_weights: dict[str, float]) -> Setting:
    def fuse(text: list[tuple[uuid.UUID, float]], vec: list[tuple[uuid.UUID, float]]) -> list[Fused[uuid.UUID]]:
        factors = {"fts": _factors(text, evidence_weights)}
        return weighted_score({"fts": text, "vector": vec}, weights={}, factors=factors)

    label = "weighted evidence " + "/".join(f"{evidence_weights[e]:g}" for e in EVIDENCE)
    config = {"fusion": "weighted", "fts_evidence_weights": evidence_weights}
    # normalised, the vector route's first may lead its second by any margin, however small
    words = max(evidence_weights["all_terms"], evidence_weights["some_terms"])
    return Setting(label, fuse, config, words_override=words > 0)


def sweep_grid() -> list[Setting]:
    """On an exact tie the earlier setting is kept, so the order is from the least influence of
    words-only full-text matches (factor 0) up, exact factor 1 before 2. Route weights stay
    1; the evidence factors scale full text."""
    words = (0.0, 0.01, 0.03, 0.1, 0.25, 1.0)
    settings = []
    for k in (60, 30, 20, 10):
        for exact, all_terms, some_terms in itertools.product((1.0, 2.0), words, words):
            weights = {"exact": exact, "all_terms": all_terms, "some_terms": some_terms}
            settings.append(rrf_setting(k, weights))
    # one factor for every level: the same as a lower full-text route weight
    for k, factor in itertools.product((60, 30, 20, 10), (0.5, 0.25, 0.1)):
        settings.append(rrf_setting(k, dict.fromkeys(EVIDENCE, factor)))
    # what pgvector's documented query does, at page level: only each route's top 20 count
    settings.append(rrf_setting(60, dict.fromkeys(EVIDENCE, 1.0), depth=PGVECTOR_TOP))
    for exact, rest in itertools.product((1.0, 2.0), (0.0, 0.03, 0.1, 0.25, 1.0)):
        settings.append(weighted_setting({"exact": exact, "all_terms": rest, "some_terms": rest}))
    return settings


def floor_of(singles: list[dict[str, Score]]) -> dict[str, tuple[int, float]]:
    """Per kind, the best single route's hit@5 count and MRR@10 (each metric's own best)."""
    return {kind: (max(s[kind].hits for s in singles), max(s[kind].mrr for s in singles)) for kind in KINDS}


def objective(
    setting: Setting, scores: dict[str, Score], floor: dict[str, tuple[int, float]], ties: int
) -> tuple[float, ...]:
    """What a setting is chosen by: first, words-only full-text matches must not override the
    vector route's first answer (a rule, not a measurement); then never worse than the best
    single route on either kind (hit@5 and MRR@10; how far below, when it is); then all hits;
    then MRR@10; then fewer exact ties in the top 10 (an order only a tie decides is luck)."""
    shortfall = sum(
        max(0, floor[kind][0] - scores[kind].hits) + max(0.0, floor[kind][1] - scores[kind].mrr) for kind in KINDS
    )
    return (not setting.words_override, -round(shortfall, 6), scores["all"].hits, round(scores["all"].mrr, 6), -ties)


def exact_ties(fused: list[Fused[uuid.UUID]], n: int = 10) -> int:
    """Neighbours in the first `n` that only the id order puts in order."""
    top = fused[:n]
    return sum(
        a.score == b.score and min(a.ranks.values()) == min(b.ranks.values()) for a, b in itertools.pairwise(top)
    )


def fused_answers(
    setting: Setting, text: Lists, vec: Lists, pages: dict[uuid.UUID, str], ties: dict[str, int] | None = None
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The setting's answers as fused (ties by page, as the daemon orders them by source path) and
    with exact ties in the opposite key order: which tied page comes first is still arbitrary.
    `ties` receives, per question, the exact ties in the first 10."""
    as_fused, reversed_ties = {}, {}
    for qid in text:
        fused = setting.fuse(text[qid], vec[qid])
        if ties is not None:
            ties[qid] = exact_ties(fused)
        as_fused[qid] = [pages[f.key] for f in settle_ties(fused, pages)][:10]
        flipped = sorted(fused, key=lambda f: str(f.key), reverse=True)
        flipped.sort(key=lambda f: (-f.score, min(f.ranks.values())))  # stable: reversed key order within ties
        reversed_ties[qid] = [pages[f.key] for f in flipped][:10]
    return as_fused, reversed_ties


def worst_of(a: dict[str, Score], b: dict[str, Score]) -> dict[str, Score]:
    """Per kind, the lower hit count and the lower MRR of two scorings."""
    return {
        kind: Score(hits=min(a[kind].hits, b[kind].hits), rr=min(a[kind].rr, b[kind].rr), of=a[kind].of) for kind in a
    }
