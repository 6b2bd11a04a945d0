"""docs/ARCHITECTURE.md stays true of the code: its table of actors is the supervision tree that
`assemble()` builds, in start order, and every repository path it names exists.

The tree is read from `assemble()` itself, which builds the supervisor without starting
anything (the same call `recalld serve` makes, with a real pool): once with every optional part
on (the embedded PostgreSQL's keeper, the title model, a provider, the resolver), once with all
of them off, where exactly the rows whose "runs" cell says `always` must remain.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from recalld.assembly import assemble
from recalld.config import build
from recalld.metrics import Metrics
from recalld.providers.early import EarlyModels
from recalld.providers.title_process import TitleModelProcess
from recalld.store.embedded import EmbeddedPostgres
from recalld.systemd import Notifier
from tests.support import ROOT

DOC = ROOT / "docs/ARCHITECTURE.md"
TREE_SECTION = "## The supervision tree"
ALWAYS = "always"

# A repository path: a top folder of the checkout, then path characters. What follows `::` (a
# name inside a module) is not part of it; sentence punctuation after it is dropped.
PATH = re.compile(r"(?<![\w./-])((?:daemon|actors|tests|bench|docs)/[\w./-]*)")


def actor_rows(text: str) -> list[tuple[str, str]]:
    """(actor, the "runs" cell) of each row of the table under TREE_SECTION, in the doc's order."""
    lines = text.splitlines()
    start = lines.index(TREE_SECTION)
    rows: list[tuple[str, str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("## "):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        name = re.fullmatch(r"`([\w-]+)`", cells[0]) if cells else None
        if name is not None:
            rows.append((name.group(1), cells[1]))
    return rows


def named_paths(text: str) -> set[str]:
    return {match.rstrip(".,;:") for match in PATH.findall(text)}


def test_actor_rows_reads_the_table_in_order() -> None:
    text = "\n".join(
        [
            "## Other",
            "| `elsewhere` | always |",
            TREE_SECTION,
            "| actor | runs | what |",
            "| --- | --- | --- |",
            "| `first` | always | x |",
            "| `second-one` | with a provider | y |",
            "## Next",
            "| `after` | always |",
        ]
    )
    assert actor_rows(text) == [("first", ALWAYS), ("second-one", "with a provider")]


def test_named_paths_reads_paths_without_their_punctuation() -> None:
    text = "see `actors/kernel/batching.py::WriteBehind`, daemon/store/. And tests/pure/x.py; not recalld.actors/y"
    assert named_paths(text) == {"actors/kernel/batching.py", "daemon/store/", "tests/pure/x.py"}


def test_every_repository_path_the_doc_names_exists() -> None:
    paths = named_paths(DOC.read_text())
    assert len(paths) > 20, f"the doc names suspiciously few paths: {sorted(paths)}"
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


async def _tree(
    pool: asyncpg.Pool, data_dir: Path, settings: dict[str, Any], embedded: EmbeddedPostgres | None, early: EarlyModels
) -> list[str]:
    """The names of the supervised actors `assemble()` builds, in start order."""
    async with httpx.AsyncClient() as http:
        daemon = assemble(
            build(settings, environ={}),
            pool=pool,
            dsn="postgresql:///unused",
            embedded=embedded,
            http=http,
            data_dir=data_dir,
            metrics=Metrics(),
            notifier=Notifier(None),
            listeners=[],
            early=early,
        )
    return list(daemon.supervisor.status())


@pytest.mark.anyio
async def test_the_documented_actors_are_the_tree_with_every_part_on(
    pool: asyncpg.Pool, postgres: EmbeddedPostgres, tmp_path: Path
) -> None:
    settings = {
        "embedding": {"provider": "local"},
        "resolver": {"enabled": True, "url": "http://127.0.0.1:9/v1", "model": "judge"},
    }
    # the session's embedded server stands for the daemon's own: assembling starts nothing
    early = EarlyModels(recall=None, title=TitleModelProcess())  # constructed, never started
    tree = await _tree(pool, tmp_path, settings, postgres, early)
    documented = [name for name, _ in actor_rows(DOC.read_text())]
    assert documented == tree, f"docs/ARCHITECTURE.md lists {documented}; assemble() supervises {tree}"


@pytest.mark.anyio
async def test_the_actors_documented_as_always_are_the_tree_with_every_part_off(
    pool: asyncpg.Pool, tmp_path: Path
) -> None:
    settings = {"embedding": {"provider": "none"}, "resolver": {"enabled": False}}
    tree = await _tree(pool, tmp_path, settings, None, EarlyModels(recall=None, title=None))
    always = [name for name, runs in actor_rows(DOC.read_text()) if runs == ALWAYS]
    assert always == tree, f"docs/ARCHITECTURE.md runs {always} always; assemble() supervises {tree}"
