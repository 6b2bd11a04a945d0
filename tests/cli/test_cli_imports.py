"""The CLI's client-side commands load the client side only: no aiohttp server, asyncpg, FAISS,
numpy, ONNX Runtime, config or server module. Each command runs for real against a daemon, in a
process of its own, and reports what it had loaded when it finished."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from recalld.store.embedded import EmbeddedPostgres
from tests.support import Daemon, create_database, scratch_dir

SERVER_SIDE = (
    "aiohttp",
    "asyncpg",
    "faiss",
    "numpy",
    "onnxruntime",
    "tokenizers",
    "recalld.app",
    "recalld.config",
    "recalld.control",
    "recalld.services",
    "recalld.store",
    "recalld.providers",
    "recalld.actors.embedding.embedder",
    "recalld.actors.index.manager",
)
"""What only `recalld serve` (or `restore`, `calibrate`, `mcp`) needs."""

PROGRAM = """
import json, os, sys
from recalld.cli.commands import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
finally:
    loaded = sorted(m for m in sys.modules if any(m == s or m.startswith(s + ".") for s in SERVER_SIDE))
    with open(os.environ["IMPORTS_REPORT"], "w") as report:
        json.dump({"code": code, "loaded": loaded}, report)
"""


def run(daemon: Daemon, tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    report = tmp_path / f"imports-{uuid.uuid4().hex}.json"
    env = {**os.environ, "RECALLD_SOCKET": str(daemon.socket), "IMPORTS_REPORT": str(report)}
    program = f"SERVER_SIDE = {SERVER_SIDE!r}\n{PROGRAM}"
    done = subprocess.run(
        [sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
    )
    return done, json.loads(report.read_text())


@pytest.fixture(scope="module")
def daemon(postgres: EmbeddedPostgres) -> Iterator[Daemon]:
    """This module's daemon, its assignment ticks an hour apart: what `written` observes is still
    waiting for its first tick when `recalld assignments` shows it."""
    home = scratch_dir("recalld-test-")
    env = {"RECALLD_STORE_DSN": create_database(postgres), "RECALLD_ASSIGNMENTS_INTERVAL_S": "3600"}
    instance = Daemon(home, env).start()
    yield instance
    code = instance.stop()
    shutil.rmtree(home, ignore_errors=True)
    assert code == 0, f"daemon did not exit cleanly ({code})"


@pytest.fixture(scope="module")
def written(daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A namespace with a record, an observed entity and a folder to ingest, for the commands below."""
    ns = f"cli-imports-{uuid.uuid4().hex[:8]}"
    status, created = daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "rule", "title": "Refunds need two approvals", "body": "x"}
    )
    assert status == 201, created
    status, forgettable = daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "rule", "title": "Old parking rules", "body": "y"}
    )
    assert status == 201, forgettable
    status, found = daemon.call("POST", "/v1/recall", {"namespace": ns, "query": "refund approvals", "routes": ["fts"]})
    assert status == 200 and [hit["id"] for hit in found["results"]] == [created["id"]], found
    observed = {"entity": "kettle", "characteristic": "wattage", "supplier": "acme", "value": "1500 W", "trust": 0.5}
    assert daemon.call("POST", "/v1/observations", {"observations": [observed]})[0] == 202
    folder = tmp_path_factory.mktemp("corpus")
    (folder / "notes.md").write_text("# Pager rota\n\nOne engineer carries the pager each week.\n")
    observations = tmp_path_factory.mktemp("observations") / "kettles.jsonl"
    observations.write_text(json.dumps({**observed, "characteristic": "colour", "value": "white"}) + "\n")
    backup = tmp_path_factory.mktemp("backups") / "first"
    return {
        "ns": ns,
        "id": created["id"],
        "forgettable": forgettable["id"],
        "search": found["search_id"],
        "folder": str(folder),
        "observations": str(observations),
        "backup": str(backup),
    }


COMMANDS = [
    ["--version"],
    ["--help"],
    ["health"],
    ["health", "--ready"],
    ["put", "-n", "{ns}", "--kind", "rule", "--title", "Invoices are due in 30 days", "--body", "Net 30."],
    ["put", "--id", "{id}", "-n", "{ns}", "--kind", "rule", "--title", "Refunds need two approvals", "--body", "z"],
    ["get", "{id}"],
    ["forget", "{forgettable}"],
    ["recall", "-n", "{ns}", "refund approvals"],
    ["recall", "-n", "{ns}", "refund approvals", "--json", "--min-similarity", "0.2"],
    ["feedback", "{search}", "{id}", "--useful"],
    ["usage", "-n", "{ns}"],
    ["stats", "-n", "{ns}"],
    ["generations"],
    ["generations", "-n", "{ns}", "--json"],
    ["eval", "--history"],
    ["dupes", "-n", "{ns}"],
    ["observe", "kettle", "height", "acme", "24 cm", "--trust", "0.7"],
    ["observe", "--file", "{observations}"],
    ["assignments", "kettle"],  # wattage and more, each waiting for the first tick
    ["disputes", "list"],
    ["backup", "{backup}"],
    ["ingest", "{folder}", "-n", "{ns}"],
]


@pytest.mark.parametrize(
    "command", COMMANDS, ids=[" ".join(c[:1] + [a for a in c[1:] if a.startswith("--")]) for c in COMMANDS]
)
def test_a_client_command_loads_nothing_of_the_server(
    daemon: Daemon, written: dict[str, str], tmp_path: Path, command: list[str]
) -> None:
    args = [part.format(**written) for part in command]
    done, report = run(daemon, tmp_path, *args)
    assert report["code"] in (0, None), (done.stdout, done.stderr)
    assert report["loaded"] == [], f"recalld {' '.join(args)} loaded {report['loaded']}"
