"""Vector similarity floors (`[recall] thresholds`): what a floor costs in answers and what it buys.

    .venv/bin/python -m bench.thresholds [--write docs/RETRIEVAL.md]

Both golden corpora, as bench/retrieval.py left them indexed in its data dirs (the largest
namespace of each). For each corpus, on the vectors its daemon stored and the query vectors of the
same local model and template:

- its own questions: the cosine of the best chunk of the best expected page found in the top 5
  (what a floor must not cut: the answer);
- the other corpus's questions, whose answers are not there (off-topic): the cosine of the best
  page (what a floor should cut: the vector route's best guess when nothing is relevant). Left
  out: questions whose expected page documents a program both corpora document (`pg_dump` has a
  man page and a pgdocs page), which the other corpus can answer.

A floor at or below every answer's cosine loses no answer; the table says how many off-topic
questions it leaves without a vector answer at all.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import numpy as np

from bench.lib.daemon import embedded_dsn, start_daemon, stop_daemon
from bench.lib.golden import Question, load_questions, readiness_space
from bench.lib.paths import ROOT
from bench.lib.report import machine, progress, publish, write_option
from bench.lib.routes import Corpus, embed_queries, faiss_run, load_corpus
from recalld.client import Client


@dataclass
class Golden:
    name: str
    data_dir: Path
    questions: list[Path]


GOLDEN = [
    Golden("pgdocs", ROOT / "var/retrieval/data", [ROOT / "bench/golden/pgdocs.toml"]),
    Golden(
        "man pages",
        ROOT / "var/retrieval-man/data",
        [ROOT / "bench/golden/manpages.toml", ROOT / "bench/golden/manpages_fresh2.toml"],
    ),
]
FLOORS = (0.25, 0.30, 0.35, 0.40, 0.45, 0.50)


def stored_corpus(golden: Golden) -> Corpus:
    socket = golden.data_dir.parent / "recalld.sock"
    daemon = start_daemon(golden.data_dir, socket, golden.data_dir.parent / "serve.log")
    try:
        client = Client(socket)
        try:
            space, space_id = readiness_space(client)
        finally:
            client.close()

        async def load() -> Corpus | None:
            conn = await asyncpg.connect(embedded_dsn(golden.data_dir))
            try:
                namespace = await conn.fetchval(
                    "SELECT namespace FROM records WHERE deleted_at IS NULL"
                    " GROUP BY namespace ORDER BY count(*) DESC LIMIT 1"
                )
                return None if namespace is None else await load_corpus(conn, namespace, space, space_id)
            finally:
                await conn.close()

        corpus = asyncio.run(load())
    finally:
        stop_daemon(daemon)
    if corpus is None:
        raise SystemExit(
            f"nothing is indexed in {golden.data_dir}: run `python -m bench.retrieval` for {golden.name} first"
        )
    return corpus


def ranked_pages(corpus: Corpus, questions: list[Question]) -> list[list[tuple[str, float]]]:
    """Per question, pages by the cosine of their best chunk, best first: the raw FAISS lists of
    bench/retrieval.py, on the same query vectors."""
    vectors, _ = embed_queries(questions, corpus.template_version)
    _, lists = faiss_run(corpus, questions, vectors)
    return [[(corpus.pages[record], cosine) for record, cosine in lists[q.id]] for q in questions]


def program(page: str) -> str:
    """The program a page documents, spelled alike in both corpora: `pg_dump.1` and `app-pgdump`
    are both `pgdump`; other pages give their stem, which matches nothing on the other side."""
    name = page.removeprefix("app-").split(".")[0]
    return "".join(ch for ch in name.lower() if ch.isalnum())


def shared_programs(corpora: dict[str, Corpus]) -> set[str]:
    """Names that a page of every corpus is named after (`pg_dump.1`, `app-pgdump`); a chance
    match of two other page names only leaves a few more questions out."""
    sides = [{program(page) for page in corpus.pages.values()} for corpus in corpora.values()]
    return set.intersection(*sides)


def answer_cosines(corpus: Corpus, questions: list[Question]) -> list[float]:
    """Per question whose answer is in the top 5: the cosine of its best expected page there."""
    found = []
    for question, pages in zip(questions, ranked_pages(corpus, questions), strict=True):
        cosines = [cosine for page, cosine in pages[:5] if page in question.expected]
        if cosines:
            found.append(max(cosines))
    return found


def top_cosines(corpus: Corpus, questions: list[Question]) -> list[float]:
    return [pages[0][1] for pages in ranked_pages(corpus, questions)]


def report() -> list[str]:
    corpora = {golden.name: stored_corpus(golden) for golden in GOLDEN}
    questions = {golden.name: load_questions(golden.questions) for golden in GOLDEN}
    shared = shared_programs(corpora)
    progress(f"programs both corpora document (their questions are not off-topic anywhere): {sorted(shared)}")
    lines = [
        f"Measured on {machine()}: the stored vectors of `bench/retrieval.py`'s namespaces, the local model.",
        "",
        "Command: `.venv/bin/python -m bench.thresholds --write docs/RETRIEVAL.md`",
        "",
        "| corpus | answers in the top 5: cosine min / 5% / median | off-topic: best cosine 5% / median / 95% |"
        + "".join(f" floor {floor:.2f}: answers lost · off-topic emptied |" for floor in FLOORS),
        "|---|---|---|" + "---|" * len(FLOORS),
    ]
    for golden in GOLDEN:
        corpus = corpora[golden.name]
        progress(f"{golden.name}: its own questions, then the other corpus's")
        answers = np.array(answer_cosines(corpus, questions[golden.name]))
        others = [
            q
            for name, qs in questions.items()
            if name != golden.name
            for q in qs
            if not {program(page) for page in q.expected} & shared
        ]
        off_topic = np.array(top_cosines(corpus, others))
        cells = [
            f"{golden.name} ({len(answers)} answers, {len(off_topic)} off-topic)",
            " / ".join(f"{x:.3f}" for x in (answers.min(), *np.quantile(answers, [0.05, 0.5]))),
            " / ".join(f"{x:.3f}" for x in np.quantile(off_topic, [0.05, 0.5, 0.95])),
        ]
        cells += [
            f"{int((answers < floor).sum())} · {int((off_topic < floor).sum())}/{len(off_topic)}" for floor in FLOORS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    write = write_option(__doc__, "thresholds.py", argv)
    lines = report()
    publish(lines, write, "thresholds.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
