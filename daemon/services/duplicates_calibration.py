"""`recalld calibrate PAIRS`: every labelled title pair's score with the configured title model
(`[duplicates] model`) and duplicate stages, its verdict at the configured threshold, and the thresholds (if any)
that separate the pairs (docs/DUPLICATES.md, "Calibration").

It runs the provider in-process, as the daemon would, without a daemon: the pairs are the
same whatever is stored. The scoring is the check's own (`actors/duplicates/rules.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np

from recalld.actors.duplicates.rules import Contrast, Tally, reported, separating_range, staged, tally, title_text
from recalld.actors.embedding.template import render_title
from recalld.actors.ports.embedding import EmbeddingProvider
from recalld.config import Config
from recalld.paths import default_cache_dir
from recalld.providers import make_provider
from recalld.providers.duplicates_model import TitleModelProvider, uses_title_model
from recalld.services.duplicates import stages_for


class PairsError(ValueError):
    """The pairs file cannot be used; the message says why."""


class Pair(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    a: str
    b: str
    duplicate: bool
    """True: the pair must warn (one item said twice); false: it must not (neighbouring items)."""
    held_out: bool = False
    """Not looked at while choosing the threshold and stages: the figures that say how well the
    choice generalises."""
    langs: str = ""
    source: str = ""


class PairsFile(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    about: str = ""
    pairs: list[Pair]


@dataclass(frozen=True)
class ScoredPair:
    pair: Pair
    cosine: float
    score: float
    """After the stages: what is compared with the threshold."""
    warns: bool


@dataclass(frozen=True)
class Calibration:
    model: str
    threshold: float
    contrast: Contrast
    pairs: list[ScoredPair]

    def tally(self, held_out: bool | None = None) -> Tally:
        """At the configured threshold, of every pair (None), the tuned ones or the held-out ones."""
        chosen = [p for p in self.pairs if held_out is None or p.pair.held_out == held_out]
        return tally([(p.score, p.pair.duplicate) for p in chosen], self.threshold)

    def separating(self, *, staged: bool = True) -> tuple[float, float] | None:
        return separating_range([(p.score if staged else p.cosine, p.pair.duplicate) for p in self.pairs])

    def as_json(self) -> dict[str, Any]:
        def figures(t: Tally) -> dict[str, int]:
            return {
                "caught": t.caught,
                "duplicates": t.duplicates,
                "false_alarms": t.false_alarms,
                "distinct": t.distinct,
            }

        return {
            "model": self.model,
            "threshold": self.threshold,
            "contrast": {
                "penalty": self.contrast.penalty,
                "slot_words": self.contrast.slot_words,
                "numbers": self.contrast.numbers,
                "cross_language_penalty": self.contrast.cross_language,
            },
            "all": figures(self.tally()),
            "tuned": figures(self.tally(held_out=False)),
            "held_out": figures(self.tally(held_out=True)),
            "separating": self.separating(),
            "separating_cosine": self.separating(staged=False),
            "pairs": [
                {**msgspec.to_builtins(p.pair), "cosine": reported(p.cosine), "score": p.score, "warns": p.warns}
                for p in self.pairs
            ],
        }


def load_pairs(path: Path) -> list[Pair]:
    try:
        document = msgspec.json.decode(path.read_bytes(), type=PairsFile)
    except OSError as exc:
        raise PairsError(f"{path}: {exc.strerror or exc}") from None
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise PairsError(f"{path}: {exc}") from None
    if not document.pairs:
        raise PairsError(f"{path}: no pairs")
    if any(not pair.a.strip() or not pair.b.strip() for pair in document.pairs):
        raise PairsError(f"{path}: a pair has an empty title")
    return document.pairs


async def calibrate(pairs: list[Pair], config: Config) -> Calibration:
    """Embed every title of `pairs` with the configured provider, as the check embeds a title,
    and score each pair as the check would. Raises EmbeddingError when the provider fails."""
    settings = config.duplicates
    texts = sorted({title_text(t) for pair in pairs for t in (pair.a, pair.b)})
    async with httpx.AsyncClient() as http:
        provider: EmbeddingProvider | None
        if uses_title_model(settings.model, config.embedding.provider):
            provider = TitleModelProvider(default_cache_dir())
        else:
            provider = make_provider(config.embedding, http)
        if provider is None:
            raise PairsError("no embedding provider is configured ([embedding] provider = none)")
        model = provider.describe().model
        rendered = [render_title(t, version=config.embedding.template_version).text for t in texts]
        parts = []
        async with provider:
            for start in range(0, len(rendered), config.embedding.max_batch):
                batch = await provider.embed(
                    rendered[start : start + config.embedding.max_batch], timeout=config.embedding.timeout_s
                )
                parts.append(np.asarray(batch.vectors, dtype=np.float32))
    matrix = np.concatenate(parts)
    # The check compares vectors the embedder validated as unit length; a remote model's may not be.
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    vectors = dict(zip(texts, matrix, strict=True))
    threshold = settings.thresholds.get(model, settings.threshold)
    contrast = stages_for(settings, model)
    scored = []
    for pair in pairs:
        a, b = title_text(pair.a), title_text(pair.b)
        cosine = float(vectors[a].astype(np.float64) @ vectors[b].astype(np.float64))
        score = reported(staged(cosine, a, b, contrast))
        scored.append(ScoredPair(pair, cosine, score, score >= threshold))
    return Calibration(model, threshold, contrast, scored)


def dumps(calibration: Calibration) -> str:
    return json.dumps(calibration.as_json(), indent=2, ensure_ascii=False)
