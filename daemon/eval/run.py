"""One eval run over the control socket, as any client does it (docs/EVAL.md): ingest the golden set's
corpus into a namespace of its own, wait until the vector route covers it, ask every question
through each route and fused, score the answers, and forget the namespace's records afterwards.

The namespace is fresh and timestamp-suffixed (`eval-<set>-<UTC time>`), so the searches an eval
makes are recorded under a name no client uses: `recalld stats` and feedback are per namespace,
and nothing of the eval mixes into a real namespace's figures.
"""

from __future__ import annotations

import datetime as dt
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import msgspec

from recalld.actors.progress import Estimate, advance, begin
from recalld.actors.recall.metrics import ALL, Score, first_rank, is_hit, score
from recalld.client import Client
from recalld.client.ingest import Summary, ingest
from recalld.eval.floor import SpaceIdentity
from recalld.eval.golden import GoldenSet, slug
from recalld.wire.recall import Route

ROUTES = ("fts", "vector", "fused")
"""`fused` is a recall that names no route: the daemon's default routes and fusion."""
RESULTS_K = 10
DEADLINE_MS = 30_000
"""Generous: an eval measures answers, not latency, and a route cut short by a busy machine
would count as a miss that is not the model's."""
SHOWN_FIRST = 3
"""How many of a miss's first answers the report shows."""


class EvalError(Exception):
    """The run could not measure what it set out to (the daemon cannot embed, a route degraded)."""


@dataclass
class RouteRun:
    route: str
    answers: dict[str, list[str]] = field(default_factory=dict)
    """Question id -> the answer's files, best first: corpus-relative paths, or `(title)` for a
    record from outside the corpus (there should be none: the namespace is the eval's own)."""
    latency_ms: list[float] = field(default_factory=list)
    degraded: list[tuple[str, str]] = field(default_factory=list)
    """(question id, `route: reason`) for every answer a route was missing from."""
    fusion: dict[str, Any] | None = None

    def latency(self) -> dict[str, float]:
        if not self.latency_ms:
            return {}
        ordered = sorted(self.latency_ms)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        return {"p50": round(statistics.median(ordered), 1), "p95": round(p95, 1)}


@dataclass
class EvalRun:
    golden: GoldenSet
    namespace: str
    space: SpaceIdentity
    space_id: str
    started_at: dt.datetime
    ingest: Summary
    index_wait_s: float = 0.0
    runs: dict[str, RouteRun] = field(default_factory=dict)
    duration_s: float = 0.0
    forgotten: int | None = None
    """Records forgotten afterwards; None when the namespace was kept."""

    def scores(self) -> dict[str, dict[str, Score]]:
        kinds = self.golden.kinds
        return {route: score(run.answers, self.golden.questions, kinds) for route, run in self.runs.items()}

    def count(self, route: str = "fused") -> tuple[int, int] | None:
        """The floor's measure: `route`'s hit@5 count over all questions, and of how many."""
        if route not in self.runs:
            return None
        total = self.scores()[route][ALL]
        return total.hits, total.of

    def misses(self, route: str) -> list[dict[str, Any]]:
        """The questions `route` did not answer in its top 5, with what came first instead."""
        run = self.runs[route]
        out = []
        for q in self.golden.questions:
            files = run.answers.get(q.id, [])
            if not is_hit(files, q.expected):
                out.append(
                    {
                        "id": q.id,
                        "kind": q.kind,
                        "question": q.text,
                        "expected": list(q.expected),
                        "rank": first_rank(files, q.expected),
                        "first": list(dict.fromkeys(files))[:SHOWN_FIRST],
                    }
                )
        return out

    def skipped_files(self) -> list[tuple[str, str]]:
        """(corpus-relative path, why) of each corpus file ingest skipped."""
        return [(Path(name).as_posix(), why) for name, why in self.ingest.skipped]

    def unanswerable(self) -> list[str]:
        """The ids of the questions whose expected files were all skipped: misses, whatever
        the routes answer."""
        skipped = {name for name, _ in self.skipped_files()}
        return [q.id for q in self.golden.questions if skipped.issuperset(q.expected)]

    def degraded(self) -> list[tuple[str, str, str]]:
        return [(route, qid, why) for route, run in self.runs.items() for qid, why in run.degraded]


NAME_IN_NAMESPACE = 64
"""The set's name is cut to this in its namespace, well inside `[records] max_namespace_chars`."""


def namespace_for(golden: GoldenSet, now: dt.datetime) -> str:
    return f"eval-{slug(golden.name)[:NAME_IN_NAMESPACE]}-{now.astimezone(dt.UTC):%Y%m%dT%H%M%S}Z"


def current_space(client: Client) -> tuple[SpaceIdentity, str]:
    """The vector space the daemon embeds in now (its readiness detail); an eval without one
    would measure full text only, which is not what a floor per space is about."""
    from recalld.client import ClientError

    try:
        checks = client.ready()["checks"]
    except ClientError as exc:  # 503: not ready, but the detail is still there
        checks = exc.body.get("checks", {}) if isinstance(exc.body, dict) else {}
    detail = checks.get("embedding", {}).get("detail") or {}
    if "space" not in detail:
        reason = checks.get("embedding", {}).get("reason") or "no embedding check"
        raise EvalError(f"the daemon reports no vector space ({reason}): an eval needs its embedding provider")
    return SpaceIdentity.of(detail["space"]), str(detail["space_id"])


class Bar:
    """One line on stderr, redrawn on a terminal; a line per tenth otherwise; nothing when quiet."""

    def __init__(self, what: str, enabled: bool) -> None:
        self.what = what
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self._last = -1

    def show(self, done: int, total: int, note: str = "") -> None:
        if not self.enabled or total <= 0:
            return
        if self.tty:
            filled = 30 * done // total
            sys.stderr.write(f"\r{self.what} [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {note}\x1b[K")
            sys.stderr.flush()
        elif done * 10 // total != self._last or done == total:
            self._last = done * 10 // total
            print(f"{self.what}: {done}/{total} {note}".rstrip(), file=sys.stderr)

    def end(self) -> None:
        if self.enabled and self.tty:
            sys.stderr.write("\n")


def wait_for_vectors(
    client: Client,
    namespace: str,
    *,
    progress: bool,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Until the vector route covers every live chunk of `namespace` (its `pending` 0 and a
    handle to search); returns the seconds waited. The bar counts that namespace's chunks
    embedded (`pending_chunks`; records from a daemon that does not report chunks), the eval's
    corpus: writes to other namespaces do not hold the run. It never goes back and ends at
    its total (`recalld.actors.progress`)."""
    started = clock()
    bar = Bar("embedding", progress)
    estimate: Estimate | None = None
    while True:
        answer = client.generations(namespace)
        pending = int(answer["pending"])
        chunks = answer.get("pending_chunks")
        unit = "records" if chunks is None else "chunks"
        left = pending if chunks is None else int(chunks)
        ready = answer["current"] is not None or (answer.get("index") or {}).get("handle") is not None
        done = pending == 0 and ready
        left = 0 if done else left
        estimate = begin(left, clock()) if estimate is None else advance(estimate, left, clock())
        if done:
            bar.show(estimate.total, estimate.total, unit)
            bar.end()
            return clock() - started
        waiting = estimate.done == estimate.total
        bar.show(estimate.done, estimate.total, f"{unit}; a generation is being built" if waiting else unit)
        time.sleep(poll_s)  # a client polling the daemon's progress, not a test barrier


def ask(client: Client, golden: GoldenSet, namespace: str, route: str, *, progress: bool) -> RouteRun:
    run = RouteRun(route)
    bar = Bar(f"asking ({route})", progress)
    for done, q in enumerate(golden.questions, start=1):
        routes: list[Route] | None = None if route == "fused" else [cast(Route, route)]
        started = time.perf_counter()
        answer = client.recall(namespace, q.text, k=RESULTS_K, deadline_ms=DEADLINE_MS, routes=routes)
        run.latency_ms.append((time.perf_counter() - started) * 1000)
        run.answers[q.id] = [golden.relative(r.source_path) or f"({r.title})" for r in answer.results]
        run.fusion = msgspec.to_builtins(answer.fusion)
        run.degraded += [(q.id, f"{d.route}: {d.reason}") for d in answer.degraded_routes]
        bar.show(done, len(golden.questions))
    bar.end()
    return run


def forget_namespace(client: Client, namespace: str) -> int:
    """Forget every live record of `namespace` (the eval's own); returns how many."""
    ids: list[str] = []
    after: str | None = None
    while True:
        page = client.list_records(namespace, limit=1000, after=uuid.UUID(after) if after else None)
        ids += [r["id"] for r in page["records"]]
        after = page["next"]
        if not after:
            break
    for record_id in ids:
        client.forget_record(record_id)
    return len(ids)


def evaluate(
    client: Client,
    golden: GoldenSet,
    *,
    routes: Sequence[str] = ROUTES,
    namespace: str | None = None,
    keep: bool = False,
    progress: bool = True,
    allow_skipped: bool = False,
) -> EvalRun:
    """Run `golden` through the daemon. `namespace`: use (and keep) this one instead of a fresh
    one; files already there unchanged are not embedded again. The eval's records are
    forgotten at the end, whatever happened, unless kept.

    A corpus file ingest skips stops the run (EvalError), unless `allow_skipped`: then the run
    goes on without it, the questions that expect only skipped files count as misses, and the
    run says which (`EvalRun.unanswerable`)."""
    started = time.monotonic()
    now = dt.datetime.now(dt.UTC)
    space, space_id = current_space(client)
    fresh = namespace is None
    name = namespace or namespace_for(golden, now)
    summary = Summary()
    run = EvalRun(golden, name, space, space_id, now, summary)
    try:
        run.ingest = ingest(client, golden.corpus, namespace=name, kind="doc", progress=progress)
        if run.ingest.failed or (run.ingest.skipped and not allow_skipped):
            # a file left out would make its questions unanswerable: figures of another corpus
            skipped = "; ".join(run.ingest.skipped_lines(5))
            allow = "" if run.ingest.failed else " (--allow-skipped lists the skipped files and carries on)"
            raise EvalError(
                f"the corpus did not ingest whole: {run.ingest.line()}{'; ' if skipped else ''}{skipped}{allow}"
            )
        run.index_wait_s = wait_for_vectors(client, name, progress=progress)
        for route in routes:
            run.runs[route] = ask(client, golden, name, route, progress=progress)
    finally:
        if fresh and not keep:
            run.forgotten = forget_namespace(client, name)
        run.duration_s = time.monotonic() - started
    return run
