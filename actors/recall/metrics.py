"""How well a recall answered a question with known answers: the hit criterion and the ranking
metrics of `recalld eval` (docs/EVAL.md) and of `python -m bench.retrieval`, in one place.

Pure: no I/O. Answers are scored at file level: a result is the file (`source_path`) its
record came from, several results of one file count once at the rank of its first appearance,
and a question's `expected` files are what it is judged by. Matching a chunk exactly is never
required (a chunking change must not rewrite the questions), and neither is rank 1: a caller
reads several results of an answer, so a hit is an expected file among the first HIT_AT.

Relevance is binary: every expected file is a right answer, the order they are listed in says
which page is best for a person reading the set, not how much more relevant it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

HIT_AT = 5
"""hit@5: an expected file among the first 5 distinct files of the answer."""
RANK_AT = 10
"""MRR@10, recall@10 and nDCG@10 look at the first 10 distinct files."""


class Judged(Protocol):
    """A question as the metrics see it: its id (the key of its answer), kind and expected files."""

    @property
    def id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def expected(self) -> Sequence[str]: ...


def distinct(files: Iterable[str]) -> list[str]:
    """The answer's files in order, each at its first appearance."""
    return list(dict.fromkeys(files))


def first_rank(files: Sequence[str], expected: Sequence[str], n: int = RANK_AT) -> int | None:
    """The 1-based rank of the first expected file among the first `n` distinct files, or None."""
    for position, found in enumerate(distinct(files)[:n], start=1):
        if found in expected:
            return position
    return None


def is_hit(files: Sequence[str], expected: Sequence[str], n: int = HIT_AT) -> bool:
    """The hit criterion: any expected file among the first `n` distinct files."""
    return first_rank(files, expected, n) is not None


def reciprocal_rank(files: Sequence[str], expected: Sequence[str], n: int = RANK_AT) -> float:
    """1 / the rank of the first expected file, 0 when none is in the first `n`."""
    rank = first_rank(files, expected, n)
    return 0.0 if rank is None else 1.0 / rank


def recall_at(files: Sequence[str], expected: Sequence[str], n: int = RANK_AT) -> float:
    """The share of the expected files found among the first `n` distinct files."""
    wanted = set(expected)
    if not wanted:
        return 0.0
    return len(wanted & set(distinct(files)[:n])) / len(wanted)


def ndcg_at(files: Sequence[str], expected: Sequence[str], n: int = RANK_AT) -> float:
    """Normalised discounted cumulative gain with binary relevance: sum of 1 / log2(rank + 1)
    over the expected files among the first `n`, divided by that sum for the best possible
    answer (every expected file first, at most `n` of them)."""
    wanted = set(expected)
    gained = sum(1.0 / math.log2(rank + 1) for rank, found in enumerate(distinct(files)[:n], 1) if found in wanted)
    best = sum(1.0 / math.log2(rank + 1) for rank in range(1, min(len(wanted), n) + 1))
    return gained / best if best else 0.0


@dataclass
class Score:
    """The sums over a group of questions; the means are read off them.

    `hits` is a count and is reported as one (`hits`/`of`), never as a percentage alone."""

    hits: int = 0
    rr: float = 0.0
    recall: float = 0.0
    ndcg: float = 0.0
    of: int = 0

    def add(self, files: Sequence[str], expected: Sequence[str]) -> None:
        self.hits += is_hit(files, expected)
        self.rr += reciprocal_rank(files, expected)
        self.recall += recall_at(files, expected)
        self.ndcg += ndcg_at(files, expected)
        self.of += 1

    def _mean(self, total: float) -> float:
        return total / self.of if self.of else 0.0

    @property
    def mrr(self) -> float:
        return self._mean(self.rr)

    @property
    def recall_at_10(self) -> float:
        return self._mean(self.recall)

    @property
    def ndcg_at_10(self) -> float:
        return self._mean(self.ndcg)

    def cell(self) -> str:
        """`hits/of · MRR@10`, the cell the bench's tables print."""
        return f"{self.hits}/{self.of} · {self.mrr:.3f}"

    def figures(self) -> dict[str, float | int]:
        """The figures as `recalld eval --json` writes them (means rounded to 4 places)."""
        return {
            "hit_at_5": self.hits,
            "of": self.of,
            "mrr_at_10": round(self.mrr, 4),
            "recall_at_10": round(self.recall_at_10, 4),
            "ndcg_at_10": round(self.ndcg_at_10, 4),
        }


ALL = "all"
"""The group of every question, next to one group per kind."""


def score(
    answers: Mapping[str, Sequence[str]], questions: Iterable[Judged], kinds: Iterable[str] = ()
) -> dict[str, Score]:
    """Per kind and ALL, the scores of `answers` (question id -> files, best first). A question
    with no answer counts as answered with nothing. `kinds` are listed even with no question
    (so a table keeps its columns); the others appear in the order questions bring them."""
    out = {kind: Score() for kind in kinds}
    total = Score()
    for question in questions:
        files = answers.get(question.id, ())
        out.setdefault(question.kind, Score()).add(files, question.expected)
        total.add(files, question.expected)
    return out | {ALL: total}
