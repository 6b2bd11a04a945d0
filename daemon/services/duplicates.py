"""The semantic duplicate check (docs/DUPLICATES.md): one embedding call, an exact comparison with every live
title of the namespace and kind, under a wall-clock cap. Warn only: it never fails a write.

I/O only; the rules (what a title is embedded as, which scores warn, their order) are the pure
`actors/duplicates/rules.py`. Title vectors are stored by the index manager
(`actors/duplicates/catch_up.py`) and by the checks themselves, after their answers
(`daemon/services/duplicates_writer.py`). A check compares with the live titles of its namespace
and kind kept in memory as one matrix (`daemon/services/duplicates_live.py`,
`daemon/services/duplicates_rows.py`): it reads from PostgreSQL only the records changed since
the last check and the vectors it has not seen yet.
The audit keeps the vectors it has read per space (`daemon/services/duplicates_audit.py`).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Literal

import anyio
import asyncpg
import numpy as np
import numpy.typing as npt

from recalld.actors.duplicates.rules import Contrast, catch_up, most_similar, reported, staged, title_key, title_text
from recalld.actors.embedding.embedder import Embedder
from recalld.actors.embedding.errors import EmbeddingError, Reason
from recalld.actors.kernel.breaker import BreakerState
from recalld.actors.ports.embedding import VectorSpace
from recalld.config import DuplicatesConfig
from recalld.metrics import Laps, Metrics
from recalld.services.duplicates_ahead import Ahead, Carried, batch_ahead, titles_ahead
from recalld.services.duplicates_audit import TitleMatrix, audit_pairs
from recalld.services.duplicates_live import LiveTitles
from recalld.services.duplicates_rows import KindTitles, batch_hits
from recalld.services.duplicates_writer import TitleVectorWriter
from recalld.store.db import STORE_DOWN_ERRORS
from recalld.store.duplicates import PgTitleStore
from recalld.wire.duplicates import DuplicateAudit, DuplicateCheck, DuplicatePair, DuplicateSkipReason, TitledRecord

log = logging.getLogger("recalld.duplicates")

INLINE_ROWS = 4096
"""Title rows (times the titles checked) compared on the event loop rather than in a worker
thread: 4,096 rows of 512 floats are a matrix product of well under a millisecond, less than
the hop to a thread and back costs on a loaded machine (0.3 ms at the median, 5 ms at p90
on 2 shared cores: docs/BENCHMARKS.md, "Writes with the duplicate check and indexing")."""


def stages_for(config: DuplicatesConfig, model: str) -> Contrast:
    """The second stages as configured for the model that embeds the titles: the contrast
    stage, and the cross-language penalty of that model (none for a model not listed)."""
    return Contrast(
        penalty=config.contrast_penalty,
        slot_words=config.contrast_slot_words,
        numbers=config.contrast_numbers,
        cross_language=config.cross_language_penalties.get(model, 0.0),
    )


def _skip_reason(error: EmbeddingError) -> DuplicateSkipReason:
    if error.reason is Reason.NO_PROVIDER:
        return DuplicateSkipReason.NO_PROVIDER
    if error.reason is Reason.CIRCUIT_OPEN:
        return DuplicateSkipReason.CIRCUIT_OPEN
    if error.reason is Reason.DEADLINE_EXCEEDED:
        return DuplicateSkipReason.TIME_CAP
    return DuplicateSkipReason.PROVIDER_DOWN


@dataclass(frozen=True)
class Checked:
    """A title a batch wrote (a new record, or a record retitled), to be checked."""

    namespace: str
    kind: str
    title: str
    record_id: uuid.UUID | None
    """None: a dry run's title, of no record."""


class DuplicateChecker:
    """Compares a title with the live titles of its namespace and kind.

    Guarantees of `check`: it returns by `[duplicates] time_cap_s` (plus scheduling noise) and never
    raises for the provider's or the store's trouble: a check that could not run is `skipped` with
    its reason. It makes at most one embedding call (purpose `dedupe`), none when there is nothing
    to compare with: the new title, and the live titles that have no stored vector yet, the newest
    first, as many as `[duplicates] catch_up_titles` and one provider call (`[embedding] max_batch`
    texts) allow; those it keeps, and hands to its writer to be stored after the answer (a dry run
    stores nothing), so no later check pays for them again. The titles beyond are counted in `of`,
    not in `compared`. A record of a kind in `[duplicates] unchecked_kinds` is not checked
    (`skipped`, `kind_not_checked`), and nothing is compared with it: comparisons stay within a
    kind. The record itself, its exact duplicates and forgotten records are never among the similar.
    Warned and skipped checks are logged with ids and scores, never titles, and every check is
    counted.
    """

    def __init__(
        self,
        store: PgTitleStore,
        embedder: Embedder | None,
        config: DuplicatesConfig,
        metrics: Metrics,
        *,
        writer: TitleVectorWriter,
        wake: Callable[[], None] | None = None,
    ) -> None:
        """`writer`: stores the vectors the checks embed, after their answers (it runs as an
        actor of its own); `wake`: asks the index manager to embed the titles that have no
        vector yet (None: this daemon has none)."""
        self._store = store
        self._wake = wake
        self._embedder = embedder
        self._config = config
        self._metrics = metrics
        self._matrices: dict[str, TitleMatrix] = {}
        self._live = LiveTitles(store)
        self._writer = writer
        self._carried = Carried()

    @property
    def available(self) -> bool:
        """Whether a check can run now (`duplicates.v1` in /v1/capabilities)."""
        embedder = self._embedder
        return embedder is not None and embedder.health().status == "pass"

    async def flush_usage(self) -> None:
        """Write the usage rows its embedder has gathered (the title model's, when it has one)."""
        if self._embedder is not None:
            await self._embedder.flush_usage()

    def threshold(self) -> float:
        """The threshold of the model in use (the configured one before the first probe)."""
        if self._embedder is None:
            return self._config.threshold
        space = self._embedder.space
        model = space.model if space is not None else self._embedder.info.model
        return self._config.thresholds.get(model, self._config.threshold)

    async def check(
        self,
        namespace: str,
        kind: str,
        title: str,
        *,
        record_id: uuid.UUID | None = None,
        dry_run: bool = False,
        ahead: Ahead | None = None,
    ) -> DuplicateCheck:
        """The check of `title` as (a revision of) record `record_id`; `dry_run` stores nothing;
        `ahead`: its title embedded while the record was written (`ahead`)."""
        started = time.perf_counter()
        threshold = self.threshold()
        answer: DuplicateCheck | None = self._unchecked(kind)
        if answer is None:
            with anyio.move_on_after(self._config.time_cap_s):
                # a batch of one: one code path for a title checked alone or among others
                item = Checked(namespace, kind, title, record_id)
                [answer] = await self._check_namespace(namespace, [item], dry_run, ahead)
        if answer is None:
            answer = DuplicateCheck(
                status="skipped", reason=DuplicateSkipReason.TIME_CAP, threshold=threshold, compared=0, of=0
            )
        seconds = time.perf_counter() - started
        self._report(answer, record_id, namespace, seconds, dry_run)
        return answer

    async def check_batch(
        self, items: Sequence[Checked], ahead: Mapping[str, Ahead] | None = None
    ) -> list[DuplicateCheck]:
        """The checks of a batch's written titles, in order, as `check` would answer each had
        they been written and checked one after the other: an item is compared with the live
        records and the batch's earlier items, never its later ones. One embedding call per
        namespace for all of its titles, one matrix product per namespace and kind, and one
        time cap for the whole batch: what it cuts is `skipped` with `time_cap_exceeded`.
        `ahead`: per namespace, its titles embedded while they were written (`ahead_batch`)."""
        started = time.perf_counter()
        answers: list[DuplicateCheck | None] = [self._unchecked(item.kind) for item in items]
        by_namespace: dict[str, list[int]] = {}
        for at, item in enumerate(items):
            if answers[at] is None:
                by_namespace.setdefault(item.namespace, []).append(at)
        with anyio.move_on_after(self._config.time_cap_s):
            for namespace, indices in by_namespace.items():
                titles = [items[at] for at in indices]
                done = await self._check_namespace(namespace, titles, ahead=(ahead or {}).get(namespace))
                for at, answer in zip(indices, done, strict=True):
                    answers[at] = answer
        seconds = time.perf_counter() - started
        checks: list[DuplicateCheck] = []
        for item, maybe in zip(items, answers, strict=True):
            answer = maybe or DuplicateCheck(
                status="skipped", reason=DuplicateSkipReason.TIME_CAP, threshold=self.threshold(), compared=0, of=0
            )
            self._report(answer, item.record_id, item.namespace, seconds, False)
            checks.append(answer)
        return checks

    def ahead(self, namespace: str, kind: str, title: str) -> AbstractAsyncContextManager[Ahead | None]:
        """Embed `title` while the block runs (its record is being written), for the check that
        follows (`check(..., ahead=)`): it makes no embedding call then (`duplicates_ahead`)."""
        return titles_ahead(self._live, self._embedder, self._config, namespace, [(kind, title)], self._carried)

    def ahead_batch(self, items: Sequence[tuple[str, str, str]]) -> AbstractAsyncContextManager[dict[str, Ahead]]:
        """`ahead` for a batch's (namespace, kind, title)s: one embedding call per namespace, of
        all its titles, for `check_batch(..., ahead=)`."""
        return batch_ahead(self._live, self._embedder, self._config, items, self._carried)

    def _unchecked(self, kind: str) -> DuplicateCheck | None:
        """The answer for a record of a kind that is never checked (None: the kind is checked)."""
        if kind not in self._config.unchecked_kinds:
            return None
        reason = DuplicateSkipReason.KIND_NOT_CHECKED
        return DuplicateCheck(status="skipped", reason=reason, threshold=self.threshold(), compared=0, of=0)

    async def _check_namespace(
        self, namespace: str, items: Sequence[Checked], dry_run: bool = False, ahead: Ahead | None = None
    ) -> list[DuplicateCheck]:
        """The checks of `items`, all of `namespace`; `dry_run` stores nothing; `ahead`: titles
        embedded already."""
        threshold = self.threshold()

        def skipped(reason: DuplicateSkipReason, of: int = 0) -> DuplicateCheck:
            return DuplicateCheck(status="skipped", reason=reason, threshold=threshold, compared=0, of=of)

        embedder = self._embedder
        if embedder is None:
            return [skipped(DuplicateSkipReason.NO_PROVIDER) for _ in items]
        started, lap = anyio.current_time(), Laps(self._metrics.duplicate_check_stages)
        norms = [title_text(item.title) for item in items]
        lives: dict[str, KindTitles] = {}
        try:
            for item in items:
                if item.kind not in lives:
                    lives[item.kind] = await self._live.kind(namespace, item.kind)
        except (*STORE_DOWN_ERRORS, asyncpg.PostgresError) as exc:
            log.warning("duplicate check could not read the titles: %s", exc)
            return [skipped(DuplicateSkipReason.UNAVAILABLE) for _ in items]
        lap("titles")
        excluded, ofs = _exclusions(items, norms, lives)  # for what to embed; taken again to compare
        # All of the batch's titles when any has something to compare: a later item compares
        # with the earlier ones, whatever those had to compare with.
        wanted = sorted(set(norms)) if any(ofs) else []
        if not wanted:
            # Nothing to compare for any: as `check` answers one such title.
            if embedder.space is None:
                return [skipped(DuplicateSkipReason.PROVIDER_DOWN) for _ in items]
            if embedder.breaker_state is BreakerState.OPEN:
                return [skipped(DuplicateSkipReason.CIRCUIT_OPEN) for _ in items]
            return [DuplicateCheck(status="clear", threshold=threshold, compared=0, of=0) for _ in items]
        until = started + self._config.time_cap_s / 2
        probed = embedder.space
        unstored: list[str] = []
        try:
            # The stored vectors first, in the space the embedder serves now: the titles found
            # with none (written a moment ago) go into the same embedding call as the new ones.
            if probed is not None:
                # those embedded ahead are not looked up: their vectors are coming
                known = set(ahead.norms) if ahead is not None else set()
                for kind, live in lives.items():
                    carried = await self._carried.vectors(set(live.waiting.values()) - known, probed.key, until)
                    unstored += await self._live.read_vectors(
                        namespace, kind, live, probed.key, probed.dimension, until=until, skip=known, found=carried
                    )
        except (*STORE_DOWN_ERRORS, asyncpg.PostgresError) as exc:
            log.warning("duplicate check could not read the title vectors: %s", exc)
            return [skipped(DuplicateSkipReason.UNAVAILABLE, of=of) for of in ofs]
        lap("vectors")
        extra = self._catch_up(unstored, set(wanted), embedder.settings.max_batch - len(wanted))
        try:
            deadline = anyio.current_time() + self._config.time_cap_s
            vectors, space = await self._embedded(embedder, namespace, wanted, extra, deadline, ahead)
        except EmbeddingError as error:
            return [skipped(_skip_reason(error), of=of) for of in ofs]
        lap("embed")
        threshold = self._config.thresholds.get(space.model, self._config.threshold)
        try:
            for kind, live in lives.items():
                if probed is None or probed.key != space.key:  # the space changed (or was probed) meanwhile
                    await self._live.read_vectors(namespace, kind, live, space.key, space.dimension, until=until)
                # the batch's own titles (its later items compare with them) and those caught up
                live.fill(vectors.get)
                live.fill(self._carried.ready(space.key))
            if not dry_run:  # stored after the answer
                self._writer.put(space, [(title_key(norm), vector) for norm, vector in vectors.items()])
        except (*STORE_DOWN_ERRORS, asyncpg.PostgresError) as exc:
            log.warning("duplicate check could not read the title vectors: %s", exc)
            return [skipped(DuplicateSkipReason.UNAVAILABLE, of=of) for of in ofs]
        lap("store")
        contrast, limit = stages_for(self._config, space.model), self._config.max_similar

        def enough(norm: str) -> Callable[[Sequence[tuple[uuid.UUID, str, float]], float], bool]:
            def judged(hits: Sequence[tuple[uuid.UUID, str, float]], beyond: float) -> bool:
                found = most_similar(hits, norm, threshold, limit, contrast)
                return len(found) == limit and found[-1].score >= beyond

            return judged

        scored: dict[int, tuple[list[tuple[uuid.UUID, str, float]], int]] = {}
        for kind, live in lives.items():
            # The rows excluded and the snapshot read together, on the event loop, with no await
            # between: while this check awaited, another one may have compacted the shared titles
            # (every row renumbered) or moved a retitled record to a new row.
            excluded, now = _exclusions(items, norms, lives)
            snapshot = live.snapshot()
            if snapshot.space != space.key:  # another check switched it to its own space meanwhile
                return [skipped(DuplicateSkipReason.UNAVAILABLE, of=of) for of in now]
            mine = [at for at, item in enumerate(items) if item.kind == kind and now[at]]
            ofs = [now[at] if item.kind == kind else of for at, (item, of) in enumerate(zip(items, ofs, strict=True))]
            if not mine:
                continue
            queries = np.stack([vectors[norms[at]] for at in mine]).astype(np.float32)
            judges = [enough(norms[at]) for at in mine]
            never = [_named_never(items, at) for at in mine]
            compare = functools.partial(
                batch_hits, snapshot, [excluded[at] for at in mine], queries, threshold, judges, never
            )
            # a few thousand titles take less than a worker thread's hop there and back
            inline = snapshot.count * len(mine) <= INLINE_ROWS
            found = compare() if inline else await anyio.to_thread.run_sync(compare)
            scored.update(zip(mine, found, strict=True))
        similar = {at: most_similar(hits, norms[at], threshold, limit, contrast) for at, (hits, _) in scored.items()}
        lap("compare")
        ids = sorted({s.id for found in similar.values() for s in found})
        try:
            titles = await self._store.titles(ids) if ids else {}
        except (*STORE_DOWN_ERRORS, asyncpg.PostgresError) as exc:
            # the batch is written already: its checks are skipped, the write still answers 200
            log.warning("duplicate check could not read the similar titles: %s", exc)
            return [skipped(DuplicateSkipReason.UNAVAILABLE, of=of) for of in ofs]
        lap("similar")
        answers = []
        for at, of in enumerate(ofs):
            if at not in scored:
                answers.append(DuplicateCheck(status="clear", threshold=threshold, compared=0, of=0))
                continue
            named = [{"id": str(s.id), "title": titles[s.id], "score": s.score} for s in similar[at] if s.id in titles]
            status: Literal["clear", "warned"] = "warned" if named else "clear"
            answers.append(
                DuplicateCheck(status=status, threshold=threshold, compared=scored[at][1], of=of, similar=named)
            )
        return answers

    async def audit(self, namespace: str, kind: str | None, *, after: uuid.UUID | None, limit: int) -> DuplicateAudit:
        """The near-duplicate pairs of one page of a namespace's records (`limit` records in id
        order after `after`) with every live record of their kind, each pair once over all pages.
        Records of unchecked kinds are left out, as from a check (`not_checked` counts them).
        Raises EmbeddingError when there is no vector space to compare in."""
        embedder = self._embedder
        if embedder is None:
            raise EmbeddingError(Reason.NO_PROVIDER, "no embedding provider is configured")
        space = embedder.space
        if space is None:
            raise EmbeddingError(Reason.EMBEDDER_NOT_READY, "the embedder has not probed its provider yet")
        threshold = self._config.thresholds.get(space.model, self._config.threshold)
        matrix = self._matrices.setdefault(space.key, TitleMatrix(space.dimension))
        contrast = stages_for(self._config, space.model)
        records = await self._store.namespace_titles(namespace, kind)
        await self._read_missing(space.key, matrix, [(record_id, norm) for record_id, _, norm in records])
        # the rows and the array read together, once: other checks append titles while this one
        # awaits each kind's comparison, and a title that arrived between two kinds would be in
        # the page of the second but among the members of neither
        rows = dict(matrix.rows)
        vectors = matrix.matrix
        by_kind: dict[str, list[tuple[uuid.UUID, int, str]]] = {}
        for record_id, record_kind, norm in records:
            if norm in rows:
                by_kind.setdefault(record_kind, []).append((record_id, rows[norm], norm))
        page = [r for r in records if after is None or r[0] > after][:limit]
        found: list[tuple[uuid.UUID, uuid.UUID, str, float]] = []
        for record_kind, members in by_kind.items():
            position = {record_id: at for at, (record_id, _, _) in enumerate(members)}
            mine = [(record_id, rows[norm], norm) for record_id, k, norm in page if k == record_kind and norm in rows]
            if not mine:
                continue
            kind_rows = np.fromiter((row for _, row, _ in members), dtype=np.int64, count=len(members))
            page_rows = np.fromiter((row for _, row, _ in mine), dtype=np.int64, count=len(mine))
            page_at = np.fromiter((position[record_id] for record_id, _, _ in mine), dtype=np.int64, count=len(mine))
            pairs = await anyio.to_thread.run_sync(audit_pairs, vectors, page_rows, page_at, kind_rows, threshold)
            for i, j, cosine in pairs:
                score = reported(staged(cosine, mine[i][2], members[j][2], contrast))
                if score >= threshold:
                    found.append((mine[i][0], members[j][0], record_kind, score))
        found.sort(key=lambda p: (-p[3], str(p[0]), str(p[1])))
        titles = await self._store.titles([record_id for pair in found for record_id in pair[:2]])
        return DuplicateAudit(
            pairs=[
                DuplicatePair(
                    a=TitledRecord(id=a, title=titles[a]), b=TitledRecord(id=b, title=titles[b]), kind=k, score=s
                )
                for a, b, k, s in found
                if a in titles and b in titles
            ],
            threshold=threshold,
            scanned=len(page),
            of=len(records),
            compared=sum(len(members) for members in by_kind.values()),
            not_checked=await self._store.count_unchecked(namespace, kind),
            unchecked_kinds=list(self._config.unchecked_kinds),
            next=page[-1][0] if len(page) == limit and page[-1][0] != records[-1][0] else None,
        )

    async def _read_missing(
        self, space_id: str, matrix: TitleMatrix, candidates: Sequence[tuple[uuid.UUID, str]]
    ) -> None:
        """Read the stored vectors of the candidates' titles this daemon has not seen yet."""
        missing = {title_key(norm): norm for _, norm in candidates if norm not in matrix.rows}
        if missing:
            found = await self._store.vectors(space_id, list(missing), matrix.dimension)
            matrix.add([(missing[key], vector) for key, vector in found.items()])

    async def _embedded(
        self,
        embedder: Embedder,
        namespace: str,
        wanted: Sequence[str],
        extra: Sequence[str],
        deadline: float,
        ahead: Ahead | None,
    ) -> tuple[dict[str, npt.NDArray[np.float32]], VectorSpace]:
        """The vectors of the check's titles (`wanted`, and the catch-up's `extra` it can have)
        and their space, by one embedding call: the one made `ahead` (its failure is the
        check's; catch-up titles it did not carry wait for a later check or the index manager),
        or the check's own."""
        if ahead is not None:
            known, space = await ahead.known()
            if ahead.error is not None:
                raise ahead.error
            if space is not None and all(norm in known for norm in wanted):
                if any(norm not in known for norm in extra) and self._wake is not None:
                    self._wake()
                return dict(known), space
        texts = [embedder.render_title(norm).text for norm in [*wanted, *extra]]
        embedded = await embedder.embed(texts, purpose="dedupe", namespace=namespace, deadline=deadline)
        return dict(zip([*wanted, *extra], embedded.vectors, strict=True)), embedded.space

    def _catch_up(self, unstored: Sequence[str], own: Collection[str], room: int) -> list[str]:
        """The titles with no stored vector that this check embeds with its own (`catch_up`);
        when more are waiting, the index manager is woken to embed them."""
        taken, left = catch_up(unstored, own, self._config.catch_up_titles, room)
        if left and self._wake is not None:
            self._wake()
        return taken

    def _report(
        self, answer: DuplicateCheck, record_id: uuid.UUID | None, namespace: str, seconds: float, dry_run: bool
    ) -> None:
        self._metrics.duplicate_checks.labels(status=answer.status, reason=answer.reason or "").inc()
        self._metrics.duplicate_check_seconds.observe(seconds)
        fields: dict[str, object] = {
            "record": str(record_id) if record_id is not None else None,
            "namespace": namespace,
            "dry_run": dry_run,
            "compared": answer.compared,
            "of": answer.of,
            "threshold": answer.threshold,
            "seconds": round(seconds, 4),
        }
        if answer.status == "warned":
            similar = [{"id": s["id"], "score": s["score"]} for s in answer.similar]
            log.info("duplicate check warned", extra={"event": "duplicate_warned", "similar": similar, **fields})
        elif answer.status == "skipped":
            # a kind the configuration leaves unchecked is no trouble: logged, but not as a warning
            level = logging.INFO if answer.reason == DuplicateSkipReason.KIND_NOT_CHECKED else logging.WARNING
            log.log(
                level,
                "duplicate check skipped",
                extra={"event": "duplicate_check_skipped", "reason": answer.reason, **fields},
            )


def _exclusions(
    items: Sequence[Checked], norms: Sequence[str], lives: dict[str, KindTitles]
) -> tuple[list[set[int]], list[int]]:
    """The rows each item does not compare with now (itself, its exact duplicates, and the
    batch's later items: written already, but after it in the batch's order), and how many it
    compares with. Row numbers hold only until the titles next change: take them in the same
    step as the snapshot they index."""
    excluded: list[set[int]] = []
    for at, (item, norm) in enumerate(zip(items, norms, strict=True)):
        live = lives[item.kind]
        later = (
            live.row_of(other.record_id) for other in items[at + 1 :] if other.kind == item.kind and other.record_id
        )
        excluded.append({*live.excluded(item.record_id, norm), *(row for row in later if row is not None)})
    ofs = [len(lives[item.kind]) - len(rows) for item, rows in zip(items, excluded, strict=True)]
    return excluded, ofs


def _named_never(items: Sequence[Checked], at: int) -> set[uuid.UUID]:
    """The ids item `at` must never name as similar: its own and the batch's later items'."""
    return {item.record_id for item in items[at:] if item.kind == items[at].kind and item.record_id is not None}
