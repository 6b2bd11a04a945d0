"""The next step in answer quality: each option side by side on one golden set.

    .venv/bin/python -m bench.quality_step --data-dir var/quality/pg/data --namespace NS \\
        [--questions FILE ...] [--title-weight W] [--write docs/RETRIEVAL.md --section NAME]

It measures on a namespace `python -m bench.retrieval` already indexed (its `--data-dir`; the namespace
its log names), with a daemon started on that data dir:

1. Today: every question through the daemon's socket, the default recall (k 10, fused), timed
   end to end (embedding included: the query-vector cache is empty for each first question).
2. The same routes offline: the daemon's own full-text code and the exact vector search over
   the stored vectors (bench/lib/routes.py), fused as the daemon fuses them.
3. Title and section boosts as a fused feature: a third ranked list over each page's heading,
   fused by RRF with a weight. Two readings of "heading": the record's title as stored, and the
   title with the page's first line (its section heading: "38.7. Function Volatility
   Categories"); two ways to match it: by words (full text over the heading, behind a GIN index
   in a scratch table) and by meaning (the local model's vector of the heading, exact search);
   bench/lib/headings.py.
   The weight is chosen on the tuning questions (odd ids, not fresh) only; with `--title-weight`
   it is given (a set with no tuning questions uses the one chosen on pgdocs). With `--chunks`,
   other indexes of the same corpus (chunked otherwise) answer through their own daemons.
4. Latency: each option's extra step is timed per question and added to that question's time
   through the daemon, so p50/p95 are per question, end to end (a second model in MiniLM's place
   adds its query embedding less MiniLM's).

An option wins when, on the held-out questions (even ids and fresh ones; every question of a set
with no tuning half), it answers at least as many in the top 5 and has at least the MRR@10 of
today on each kind, a higher MRR@10 on at least one kind, and its p95 stays under twice today's.

5. With `--options use` or `--options mpnet`, a second embedding model, USE multilingual v3 or
   all-mpnet-base-v2 (bench/lib/second_model.py): alone as the vector route, as a third list (weight
   chosen on tuning), and averaged with MiniLM.

Options this script cannot measure here (a cross-encoder reranker) are reported in
docs/RETRIEVAL.md with what was checked.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from bench.lib import second_model
from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon, wait_caught_up
from bench.lib.golden import (
    DEFAULT_QUESTIONS,
    KINDS,
    Question,
    Run,
    daemon_run,
    groups,
    load_questions,
    per_kind_table,
    readiness_space,
    score,
)
from bench.lib.headings import meaning_lists, read_headings, word_lists
from bench.lib.paths import ROOT
from bench.lib.report import machine, percentile, progress, publish
from bench.lib.routes import Lists, embed_queries, faiss_run, load_corpus, strict_lists
from recalld.actors.recall.fusion import reciprocal_rank, settle_ties
from recalld.actors.recall.query import evidence_of
from recalld.client import Client
from recalld.config import Config

SECOND_MODELS = ("use", "mpnet")
"""The `--options` that are a second embedding model (bench/lib/second_model.py)."""
WEIGHTS = (0.01, 0.03, 0.1, 0.25, 0.5, 1.0)
"""The heading list's RRF weights tried on the tuning questions (the other routes weigh 1)."""


@dataclass
class Option:
    label: str
    lists: Lists | None
    """question id -> the heading list (None: today's fusion alone)"""
    extra_ms: dict[str, float]
    """question id -> the time the option's extra step took"""
    weight: float = 0.0
    vector: Lists | None = None  # question id -> a vector route fused in place of today's
    weights: Sequence[float] = WEIGHTS  # the third list's weights tried on the tuning questions
    row: str = "+ heading list: {label}, weight {weight:g}"


def fuse(
    config: Config, text: Lists, vec: Lists, pages: dict[uuid.UUID, str], extra: Lists | None, weight: float
) -> dict[str, list[str]]:
    """The daemon's default rrf over full text and vector (evidence factors on full text), with
    the heading list as a third route of `weight`; ties by page, as recall settles them."""
    recall = config.recall
    evidence: dict[str, float] = {str(level): factor for level, factor in recall.fts_evidence_weights.items()}
    answers = {}
    for qid in text:
        routes = {"fts": text[qid], "vector": vec[qid]}
        factors = {"fts": [evidence.get(evidence_of(s).key, 1.0) for _, s in text[qid]]}
        routes["fts"] = routes["fts"][: recall.fts_candidates]
        factors["fts"] = factors["fts"][: recall.fts_candidates]
        routes["vector"] = routes["vector"][: recall.vector_candidates]
        weights = {"fts": recall.weights.get("fts", 1.0), "vector": recall.weights.get("vector", 1.0)}
        if extra is not None:
            routes["heading"] = extra[qid][: recall.vector_candidates]
            weights["heading"] = weight
        fused = reciprocal_rank(routes, k=recall.rrf_k, weights=weights, factors=factors)
        answers[qid] = [pages[f.key] for f in settle_ties(fused, pages)][:10]
    return answers


def tuning_key(
    answers: dict[str, list[str]], today: dict[str, list[str]], tuning: Sequence[Question]
) -> tuple[float, ...]:
    """What a weight is chosen by, on the tuning questions only: first how far it falls below
    today on either kind (hit@5 and MRR@10), then all hits, then MRR@10."""
    mine, base = score(answers, tuning), score(today, tuning)
    shortfall = sum(max(0, base[k].hits - mine[k].hits) + max(0.0, base[k].mrr - mine[k].mrr) for k in KINDS)
    return (-round(shortfall, 6), mine["all"].hits, round(mine["all"].mrr, 6))


def tuning_cells(answers: dict[str, list[str]], tuning: Sequence[Question]) -> str:
    scores = score(answers, tuning)
    return f"{scores['natural'].cell()}; {scores['identifier'].cell()}"


def held_out(questions: Sequence[Question]) -> list[Question]:
    tuning = [q for q in questions if not q.held_out]
    return [q for q in questions if q.held_out] if tuning else list(questions)


def wins(answers: dict[str, list[str]], today: dict[str, list[str]], questions: Sequence[Question]) -> bool:
    """No kind worse in hits or MRR@10, and MRR@10 higher on at least one: a kind already at the
    ceiling (the CI subset's identifiers at 1.000) cannot rise, and must not veto every option."""
    mine, base = score(answers, questions), score(today, questions)
    kinds = [k for k in KINDS if base[k].of]
    kept = all(mine[k].hits >= base[k].hits and mine[k].mrr >= base[k].mrr - 1e-9 for k in kinds)
    return kept and any(mine[k].mrr > base[k].mrr + 1e-9 for k in kinds)


def table(rows: list[tuple[str, dict[str, list[str]], list[float]]], questions: Sequence[Question]) -> list[str]:
    halves = groups(questions)
    header = ["option"]
    for half, qs in halves.items():
        counts = {kind: sum(q.kind == kind for q in qs) for kind in KINDS}
        header += [f"{half}: natural ({counts['natural']})", f"{half}: identifier ({counts['identifier']})"]
    header += ["p50 ms", "p95 ms"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for label, answers, latency in rows:
        cells = [label]
        for qs in halves.values():
            scores = score(answers, qs)
            cells += [scores["natural"].cell(), scores["identifier"].cell()]
        cells += [f"{percentile(latency, 50):.1f}", f"{percentile(latency, 95):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="`python -m bench.retrieval`'s --data-dir")
    parser.add_argument("--namespace", required=True, help="the namespace `python -m bench.retrieval` indexed")
    parser.add_argument("--questions", type=Path, action="append")
    parser.add_argument("--title-weight", type=float, help="the heading list's weight (default: chosen on tuning)")
    parser.add_argument(
        "--chunks",
        action="append",
        default=[],
        metavar="CHARS:OVERLAP=DATA_DIR=NAMESPACE",
        help="another index of the same corpus, chunked to CHARS with OVERLAP (`python -m bench.retrieval` run with"
        " RECALLD_INDEX_CHUNK_CHARS and _OVERLAP): its default recall through its own daemon is one more row",
    )
    parser.add_argument(
        "--options",
        action="append",
        choices=("headings", *SECOND_MODELS),
        help="the heading lists (default), or a second embedding model (bench/lib/second_model.py)",
    )
    parser.add_argument("--mpnet-dir", type=Path, help="the unzipped all-mpnet-base-v2 folder (--options mpnet)")
    parser.add_argument("--mpnet-onnx", type=Path, help="its ONNX file, from `python -m bench.packaged_models export`")
    parser.add_argument(
        "--second-weight", "--use-weight", type=float, help="the second model's list weight (default: chosen on tuning)"
    )
    parser.add_argument("--write", type=Path)
    parser.add_argument("--section", default="quality_step.py")
    args = parser.parse_args(argv)
    args.questions = args.questions or [DEFAULT_QUESTIONS]
    args.options = args.options or ["headings"]
    questions = load_questions(args.questions)
    tuning = [q for q in questions if not q.held_out]
    if not tuning and None in [args.title_weight if o == "headings" else args.second_weight for o in args.options]:
        raise SystemExit("no tuning questions in this set: give --title-weight/--second-weight (chosen on pgdocs)")
    if "mpnet" in args.options and (args.mpnet_dir is None or args.mpnet_onnx is None):
        parser.error("--options mpnet needs --mpnet-dir and --mpnet-onnx")

    variants = []
    for spec in args.chunks:
        sizes, variant_dir, variant_namespace = spec.split("=", 2)
        chars, overlap = sizes.split(":")
        # the daemon must run with the settings the index was built with, or it would build another
        env = {"RECALLD_INDEX_CHUNK_CHARS": chars, "RECALLD_INDEX_CHUNK_OVERLAP": overlap}
        run = through_daemon(Path(variant_dir).resolve(), variant_namespace, questions, env=env)[0]
        variants.append((f"chunk_chars {chars}, overlap {overlap} (own index)", run))
    data_dir = args.data_dir.resolve()
    # the daemon stays up while the options are measured: its PostgreSQL holds the route lists
    report = through_daemon(
        data_dir,
        args.namespace,
        questions,
        lambda today, space, space_id: asyncio.run(
            measure(args, questions, tuning, today, variants, space, space_id, data_dir)
        ),
    )[1]
    publish(report, args.write, args.section)
    return 0


def through_daemon(
    data_dir: Path,
    namespace: str,
    questions: Sequence[Question],
    then: Callable[[Run, dict[str, Any], str], list[str]] | None = None,
    *,
    env: dict[str, str] | None = None,
) -> tuple[Run, list[str]]:
    """Every question once through a daemon on `data_dir`, the default recall; then, with the
    daemon still up, `then` (given that run and the daemon's vector space) writes the report."""
    socket = data_dir.parent / "recalld.sock"
    daemon = start_daemon(data_dir, socket, data_dir.parent / "serve.log", env=env)
    client = Client(socket, timeout=120)
    try:
        space, space_id = readiness_space(client)
        wait_caught_up(client)  # a daemon started on other index settings would be building
        progress(f"{len(questions)} questions through the daemon on {data_dir}, the default recall")
        run = daemon_run(client, namespace, questions, "default")
        return run, then(run, space, space_id) if then else []
    finally:
        client.close()
        stop_daemon(daemon)


async def measure(
    args: argparse.Namespace,
    questions: Sequence[Question],
    tuning: Sequence[Question],
    today_run: Run,
    variants: Sequence[tuple[str, Run]],
    space: dict[str, Any],
    space_id: str,
    data_dir: Path,
) -> list[str]:
    config = Config()
    conn = await asyncpg.connect(embedded_dsn(data_dir))
    try:
        corpus = await load_corpus(conn, args.namespace, space, space_id)
        queries, minilm_ms = embed_queries(questions, corpus.template_version)
        _, vec = faiss_run(corpus, questions, queries)
        text = await strict_lists(conn, args.namespace, questions)
        progress("route lists read; the options next")
        options: list[Option] = []
        routes_alone: list[tuple[str, dict[str, list[str]]]] = []
        for heading in await read_headings(conn, args.namespace) if "headings" in args.options else []:
            words, words_ms = await word_lists(conn, heading, questions)
            options.append(Option(f"{heading.name}, by words", words, words_ms))
            meaning, meaning_ms = meaning_lists(heading, questions, queries, corpus.template_version)
            options.append(Option(f"{heading.name}, by meaning", meaning, meaning_ms))
        for name in [o for o in args.options if o in SECOND_MODELS]:
            model = second_model.use() if name == "use" else second_model.mpnet(args.mpnet_dir, args.mpnet_onnx)
            m = model.name
            key = "-".join(filter(None, (m.lower(), model.version, args.namespace, str(len(corpus.chunk_text)))))
            cache = ROOT / f"var/quality/{key}.npy"
            weights = (args.second_weight,) if args.second_weight is not None else second_model.WEIGHTS
            own, own_ms, mean, mean_ms = await second_model.routes(conn, model, corpus, questions, queries, cache)
            routes_alone += second_model.alone(corpus, {"MiniLM": vec, m: own, f"averaged with {m}": mean})
            # (a) embeds the query with the second model instead of MiniLM, whose time it saves
            instead = {q.id: own_ms[q.id] - saved for q, saved in zip(questions, minilm_ms, strict=True)}
            options += [
                Option(f"{m} as the vector route", None, instead, vector=own, row=f"{m} as the vector route (a)"),
                Option(f"{m}, third list", own, own_ms, weights=weights, row=f"+ {m} list (b), weight {{weight:g}}"),
                Option(f"cosines averaged ({m})", None, mean_ms, vector=mean, row=f"MiniLM and {m} averaged (c)"),
            ]
    finally:
        await conn.close()

    pages = corpus.pages
    latency = dict(zip([q.id for q in questions], today_run.latency_ms, strict=True))
    today = fuse(config, text, vec, pages, None, 0.0)
    daemon_answers = today_run.answers
    same = sum(daemon_answers[q.id][:5] == today[q.id][:5] for q in questions)
    rows = [
        ("today through the daemon (default fusion)", daemon_answers, list(latency.values())),
        ("today, fused offline (the same routes)", today, list(latency.values())),
    ]
    verdicts = []
    base_p95 = percentile(list(latency.values()), 95)
    test = held_out(questions)
    sweep = [
        "| option (tuning questions: natural · identifier, hit@5 · MRR@10) | "
        + " | ".join(f"weight {w:g}" for w in WEIGHTS)
        + " |",
        "|---" * (len(WEIGHTS) + 1) + "|",
    ]
    for option in options:
        routes = option.vector or vec
        if tuning and option.lists is not None:
            tried = {w: score(fuse(config, text, routes, pages, option.lists, w), tuning) for w in option.weights}
            cells = [
                f"{t['natural'].cell()}; {t['identifier'].cell()}" if (t := tried.get(w)) else "–" for w in WEIGHTS
            ]
            sweep.append(f"| {option.label} | " + " | ".join(cells) + " |")
        if option.lists is not None and args.title_weight is not None and option.weights is WEIGHTS:
            option.weight = args.title_weight
        elif option.lists is not None:  # else a route in place of today's: no weight to choose
            option.weight = max(
                option.weights,
                key=lambda w: (tuning_key(fuse(config, text, routes, pages, option.lists, w), today, tuning), -w),
            )
        answers = fuse(config, text, routes, pages, option.lists, option.weight)
        times = [latency[q.id] + option.extra_ms[q.id] for q in questions]
        rows.append((option.row.format(label=option.label, weight=option.weight), answers, times))
        won = wins(answers, today, test)
        fast = percentile(times, 95) < 2 * base_p95
        shown = f"{option.weight:g}" if option.lists is not None else "–"
        verdicts.append(
            f"| {option.label} | {shown} | {'yes' if won else 'no'} ({tuning_cells(answers, test)}) | "
            f"{percentile(times, 95):.1f} ({'under' if fast else 'over'} 2 × {base_p95:.1f}) | "
            f"{'wins on this set' if won and fast else 'kept off'} |"
        )

    for label, run in variants:
        rows.append((label, run.answers, run.latency_ms))
        won = wins(run.answers, daemon_answers, test)
        fast = percentile(run.latency_ms, 95) < 2 * base_p95
        verdicts.append(
            f"| {label} | – | {'yes' if won else 'no'} ({tuning_cells(run.answers, test)}) | "
            f"{percentile(run.latency_ms, 95):.1f} ({'under' if fast else 'over'} 2 × {base_p95:.1f}) | "
            f"{'wins on this set' if won and fast else 'kept off'} |"
        )

    headings = "headings" in args.options
    chosen = (
        "given (`--title-weight`)" if args.title_weight is not None else f"chosen on {len(tuning)} tuning questions"
    )
    return [
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine()}.",
        "",
        f"Namespace `{args.namespace}`: {len(pages)} pages, {len(corpus.chunk_text)} chunks,"
        f" {len(questions)} questions; vectors {space['provider']}/{space['model']}"
        f" ({space['dimension']}d, template v{space['template_version']}).",
        "",
        f"Command: `.venv/bin/python -m bench.quality_step {command_line(args)}`",
        "",
        "Cells: hit@5 (questions) · MRR@10, page level (actors/recall/metrics.py). Latency: per question,"
        " the default recall through the daemon's socket (embedding included), plus the option's extra step"
        " timed on its own (a second model as the vector route: its query embedding and search, less"
        " MiniLM's query embedding, which it replaces)."
        + (f" The heading list's weight is {chosen}, from {', '.join(f'{w:g}' for w in WEIGHTS)}." if headings else "")
        + (
            f" The second model's list weight (b) is given (`--second-weight {args.second_weight:g}`)."
            if args.second_weight is not None
            else f" The second model's list weight (b) is chosen on tuning, from"
            f" {', '.join(map(str, second_model.WEIGHTS))}."
            if set(SECOND_MODELS) & set(args.options)
            else ""
        )
        + f" The offline fusion answers {same}/{len(questions)} questions' top 5 exactly as the daemon did.",
        "",
        *table(rows, questions),
        "",
        *(
            ["Each vector route alone (no full text, no fusion; best chunk per page):", "", *alone, ""]
            if (alone := per_kind_table(routes_alone, questions) if routes_alone else [])
            else []
        ),
        *(
            [f"The weights tried, on the tuning questions only (today: {tuning_cells(today, tuning)}):", "", *sweep, ""]
            if tuning
            else []
        ),
        f"Verdict on the {len(test)} held-out questions, per kind (today: {tuning_cells(today, test)}; a win: at least"
        " as many hits and the MRR@10 on each kind, a higher MRR@10 on one. This set alone: the default needs a win"
        " on every set measured, p95 under 2×, so a loss here keeps an option off and a win here decides nothing):",
        "",
        "| option | weight | wins (held-out: natural; identifier) | p95 ms | verdict on this set |",
        "|---|---:|---|---|---|",
        *verdicts,
    ]


def command_line(args: argparse.Namespace) -> str:
    parts = [f"--data-dir {args.data_dir}", f"--namespace {args.namespace}"]
    parts += [f"--questions {q.relative_to(ROOT) if q.is_absolute() else q}" for q in args.questions]
    if args.title_weight is not None:
        parts.append(f"--title-weight {args.title_weight:g}")
    parts += [f"--chunks {spec}" for spec in args.chunks]
    parts += [f"--options {o}" for o in args.options if args.options != ["headings"]]
    parts += [f"--mpnet-dir {args.mpnet_dir} --mpnet-onnx {args.mpnet_onnx}"] if "mpnet" in args.options else []
    parts += [f"--second-weight {args.second_weight:g}"] if args.second_weight is not None else []
    if args.write:
        parts += [f"--section '{args.section}'", f"--write {args.write}"]
    return " ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
