"""A golden set of questions, the answers a system gives to it, and how they score: page level,
by the metrics of `recalld eval` (actors/recall/metrics.py); hit@5 counts a question when any
expected page is among the first 5 distinct pages, MRR@10 is 1/rank of the first expected page
within the first 10. Also the daemon's side: a corpus ingested, every question asked over the
socket."""

from __future__ import annotations

import statistics
import time
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.lib.paths import ROOT
from bench.lib.report import progress
from recalld.actors.recall.metrics import Score
from recalld.actors.recall.metrics import score as score_by_kind
from recalld.client import Client
from recalld.client.ingest import ingest

KINDS = ("natural", "identifier")
DEFAULT_QUESTIONS = ROOT / "bench/golden/pgdocs.toml"


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    text: str
    expected: tuple[str, ...]
    fresh: bool = False
    """Written after the fusion defaults were frozen."""
    group: str = ""
    """Its file's `group` line (who wrote it, and how), when a run reads several files."""

    @property
    def held_out(self) -> bool:
        """Even-numbered and fresh questions are never used to choose a setting."""
        return self.fresh or int(self.id[1:]) % 2 == 0


def set_description(path: Path) -> str:
    """The set file's `corpus` line (what the pages are), e.g. "the PostgreSQL 15 documentation"."""
    return str(tomllib.loads(path.read_text()).get("corpus", path.stem))


def load_questions(paths: Sequence[Path]) -> list[Question]:
    questions = []
    for path in paths:
        data = tomllib.loads(path.read_text())
        group = str(data.get("group", path.stem))
        questions += [
            Question(q["id"], q["kind"], q["question"], tuple(q["expected"]), q.get("fresh", False), group)
            for q in data["question"]
        ]
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise SystemExit(f"question ids repeat across {', '.join(map(str, paths))}")
    return questions


def groups(questions: Sequence[Question]) -> dict[str, list[Question]]:
    """The question groups every table reports: all, the held-out and tuning halves of the set the
    defaults were chosen with, the fresh questions written after that, and, when the questions
    come from several files, each file's. A group that holds every question is "all" again and
    is left out."""
    chosen_with = [q for q in questions if not q.fresh]
    found = {
        "held-out (even ids)": [q for q in chosen_with if q.held_out],
        "tuning (odd ids)": [q for q in chosen_with if not q.held_out],
        "fresh (written after the defaults)": [q for q in questions if q.fresh],
    }
    for group in dict.fromkeys(q.group for q in questions):
        found[group] = [q for q in questions if q.group == group]
    return {"all": list(questions)} | {name: qs for name, qs in found.items() if 0 < len(qs) < len(questions)}


def score(answers: dict[str, list[str]], questions: Sequence[Question]) -> dict[str, Score]:
    """Per kind and `all`: hit@5 count and MRR@10 of `answers` (question id -> pages, best first),
    by the metrics `recalld eval` reports (actors/recall/metrics.py)."""
    return score_by_kind(answers, questions, kinds=KINDS)


def ingest_corpus(client: Client, corpus: Path, namespace: str, *, reused: bool) -> None:
    progress(f"ingesting {corpus} into namespace {namespace}")
    summary = ingest(client, corpus, namespace=namespace, kind="doc", progress=True)
    progress(summary.line())
    if summary.failed and not reused:
        raise SystemExit("ingest failed")
    if summary.failed:
        # Re-ingesting a page whose title collided (stored as "title (file)") fails the update
        # with 409; the record from the first ingest is still there and unchanged.
        progress(f"warning: {len(summary.failed)} files not re-ingested; their first ingest stays")


@dataclass
class Run:
    """One system's answers: question id -> pages (best first), and per-query latencies in ms."""

    answers: dict[str, list[str]] = field(default_factory=dict)
    latency_ms: list[float] = field(default_factory=list)
    server_ms: list[float] = field(default_factory=list)
    """For daemon runs: `timings_ms.total - timings_ms.embed` (retrieval after embedding)."""
    stages: dict[str, list[float]] = field(default_factory=dict)
    """For daemon runs: `timings_ms` per stage, only where the stage ran."""
    fusion: dict[str, Any] | None = None


def stem(source_path: str | None) -> str:
    return Path(source_path).stem if source_path else ""


def daemon_run(client: Client, namespace: str, questions: Sequence[Question], label: str, **body: Any) -> Run:
    run = Run()
    for i, q in enumerate(questions, start=1):
        started = time.perf_counter()
        answer = client.request("POST", "/v1/recall", {"namespace": namespace, "query": q.text, "k": 10, **body})
        run.latency_ms.append((time.perf_counter() - started) * 1000)
        timings = answer["timings_ms"]
        run.server_ms.append(timings["total"] - timings.get("embed", 0.0))
        for name, value in timings.items():
            if value > 0:
                run.stages.setdefault(name, []).append(value)
        run.answers[q.id] = [stem(r["source_path"]) for r in answer["results"]]
        run.fusion = answer["fusion"]
        if answer["degraded_routes"]:
            raise SystemExit(f"{label}: degraded routes {answer['degraded_routes']} for {q.id}")
        if i % 20 == 0 or i == len(questions):
            progress(f"  daemon {label}: {i}/{len(questions)}")
    return run


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def per_kind_table(rows: list[tuple[str, dict[str, list[str]]]], questions: Sequence[Question]) -> list[str]:
    """One line per system: hit@5 · MRR@10 per kind and group (`groups`). `rows`: (label,
    question id -> pages) pairs."""
    halves = groups(questions)
    header = ["system"]
    for half, qs in halves.items():
        counts = {kind: sum(q.kind == kind for q in qs) for kind in KINDS}
        header += [f"{half}: natural ({counts['natural']})", f"{half}: identifier ({counts['identifier']})"]
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for label, answers in rows:
        cells = [label]
        for qs in halves.values():
            scores = score(answers, qs)
            cells += [scores["natural"].cell(), scores["identifier"].cell()]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def readiness_space(client: Client) -> tuple[dict[str, Any], str]:
    detail = client.request("GET", "/readyz")["checks"]["embedding"]["detail"]
    return detail["space"], detail["space_id"]
