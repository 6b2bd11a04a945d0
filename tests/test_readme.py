"""The documentation's examples, read from the files themselves and run as written, in the order
written, against a real daemon (the local model, PostgreSQL, a loopback LLM for the resolver).
An edit that breaks an example breaks the build.

Covered:

- README.md, section "Use it": every line of every ```sh block (comments stripped; the
  `export PATH=...` line is honoured: `recalld` is found only through it) and every ```python
  block, run with the virtualenv's Python. The working directory is prepared as the README
  assumes: a checkout's `.venv` (a link to the running one) and a `./docs` folder of a few small
  text files (and one file ingest skips).
- docs/API.md: the `curl` commands written inline (the file has no code blocks; the rest is
  tables of routes and schemas).
- docs/EVAL.md: the golden-set example made real (the ```toml block, which names its own path in
  its first line, is written there; the corpus files it and the layout block name get a few lines
  of text each), the command of the `$ recalld eval ...` block (the rest of that block is output,
  whose figures are of another set), and the floor file's ```json block compared, key by key,
  with the floor that `recalld eval --accept` writes (the layout block says it does).

Not covered: the README's set-up and test sections (they install packages, start a daemon or run
the whole suite); EVAL.md's three commands under "Measured" (they need the bench/golden corpora
built from Debian packages, and take 4 to 33 minutes: they record how the published figures were
measured).

Placeholders: an ALL-CAPS word outside quotes (or a Python string that is one) must be in
PLACEHOLDERS, filled from what an earlier line printed or from the test's own set-up, and an
absolute path must be in `paths`, mapped into the test's directory; anything else fails, so a
new README line is either runnable or consciously mapped here. Every line must exit 0; a failure
shows the line, where it is written, and its output.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.support import ROOT, Daemon, scratch_dir
from tests.support.fake_llm import ChatService, Reply, threaded_chat_server
from tests.support.waits import eventually

pytestmark = pytest.mark.slow

LINE_TIMEOUT_S = 300
ENTITY = "lamp-42"
"""The README's ENTITY: an entity the test's suppliers disagree about (230 V against 220 V), which
the loopback resolver answers with too little confidence, so it waits in moderation."""

PLACEHOLDERS = {
    "ID": "the id in the answer of the latest `recalld put ... --json`",
    "SEARCH_ID": "the search id the latest `recalld recall` printed",
    "RESULT_ID": "the id of the first result the latest `recalld recall` printed",
    "ENTITY": f"{ENTITY!r}, whose observations the test reports before the README runs",
    "DISPUTE_ID": "the first dispute the latest `recalld disputes list` printed",
}
SCRATCH_PATHS = {
    "/backups/recalld-2026-12-02": "backups/recalld-2026-12-02",
    "/var/lib/recalld-restored": "restored",
}
"""Absolute paths the examples write, mapped into the test's directory; `/run/recalld/recalld.sock`
(the root daemon's socket, in the curl lines) is mapped to the test daemon's."""
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
CORPUS = {
    "signing-keys.md": "# Rotating the signing keys\n\nEvery 90 days the on-call engineer rotates the release"
    " signing keys: generate a new key pair, publish the public key, re-sign the latest release, then revoke"
    " the old key.\n",
    "refunds.txt": "Refunds\n\nA refund above 500 EUR needs two approvals: the account owner's and finance's.\n",
    "README": "Team handbook: how we release, refund and rotate keys.\n",
    "on-call.rst": "On call\n=======\n\nThe on-call engineer answers pages within 15 minutes.\n",
    "logo.png": "\x89PNG not text",
}
"""./docs as the README's `recalld ingest ./docs` finds it (the .png is skipped, and said so)."""
HANDBOOK = {
    "kitchen/bread.md": "# Sourdough loaf\n\nFeed the starter the night before, mix flour, water and salt,"
    " let it rise for twelve hours, then bake the loaf at 230 degrees.\n",
    "car/oil.txt": "Engine oil\n\nThe car takes 5W-30 synthetic oil, 4.5 litres, changed every 15,000 km.\n",
    "car/manual.md": "# Car manual\n\nOil grade: 5W-30. Tyre pressure: 2.4 bar front, 2.2 bar rear.\n",
}
"""The text of every corpus file EVAL.md's golden set names (docs/EVAL.md gives names, not text)."""


@dataclass
class Example:
    """One runnable piece of a document: a shell line or a Python block, and where it is written."""

    kind: Literal["sh", "python"]
    code: str
    where: str


# -- reading the documents


def fenced_blocks(text: str) -> list[tuple[str, str, int]]:
    """The ``` blocks of a markdown text: (info string, body, line number of the body's first line)."""
    blocks: list[tuple[str, str, int]] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = re.match(r"^```(\S*)\s*$", lines[index])
        if opening is None:
            index += 1
            continue
        start = index + 1
        index = start
        while not lines[index].startswith("```"):
            index += 1
        blocks.append((opening.group(1), "\n".join(lines[start:index]), start + 1))
        index += 1
    return blocks


def section(text: str, title: str) -> tuple[str, int]:
    """The text of the `## title` section, and the line number it starts at."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.M | re.S)
    assert match is not None, f"no section '## {title}'"
    return match.group(1), text[: match.start(1)].count("\n")


def without_comment(line: str) -> str:
    """A shell line without its comment: a `#` that starts a word, outside quotes."""
    quote = ""
    for position, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1].isspace()):
            return line[:position].rstrip()
    return line.rstrip()


def examples(path: Path, title: str) -> list[Example]:
    """Every shell line and Python block of a section, in document order."""
    text, offset = section(path.read_text(), title)
    found: list[Example] = []
    for info, body, first in fenced_blocks(text):
        where = f"{path.name}:{offset + first}"
        if info == "python":
            found.append(Example("python", body, where))
        elif info == "sh":
            pending, start = "", 0
            for number, line in enumerate(body.splitlines()):
                pending, start = (pending + " " + line, start) if pending else (line, number)
                if pending.endswith("\\"):  # continued on the next line
                    pending = pending[:-1]
                    continue
                code = without_comment(pending)
                pending = ""
                if code:
                    found.append(Example("sh", code, f"{path.name}:{offset + first + start}"))
        else:
            raise AssertionError(f"{where}: a ```{info} block in '{title}': run it here, or say why it is not")
    return found


# -- filling placeholders


def unquoted(code: str) -> str:
    """The shell line with its quoted strings, `$NAME`s and `NAME=` assignments taken out."""
    code = re.sub(r"'[^']*'|\"[^\"]*\"", " ", code)
    return re.sub(r"\$\{?[A-Za-z_]\w*\}?|\b[A-Za-z_]\w*=", " ", code)


def placeholders_in(example: Example) -> set[str]:
    if example.kind == "sh":
        return set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", unquoted(example.code)))
    return set(re.findall(r"""["']([A-Z][A-Z0-9_]+)["']""", example.code))


def filled(example: Example, values: dict[str, str], paths: dict[str, Path]) -> str:
    """The example's code with its placeholders and absolute paths replaced; fails on any it does
    not know."""
    code = example.code
    for placeholder in sorted(placeholders_in(example)):
        assert placeholder in PLACEHOLDERS, (
            f"{example.where}: unknown placeholder {placeholder} in {example.code!r}: make the line runnable, "
            "or map the placeholder in PLACEHOLDERS (tests/test_readme.py)"
        )
        assert placeholder in values, (
            f"{example.where}: {placeholder} ({PLACEHOLDERS[placeholder]}) is used before any line produced it"
        )
        code = re.sub(rf"\b{placeholder}\b", values[placeholder], code)
    if example.kind == "sh":
        for word in shlex.split(unquoted(example.code)):
            assert not word.startswith("/") or word in paths, (
                f"{example.where}: absolute path {word} in {example.code!r}: map it in `paths` (tests/test_readme.py)"
            )
    for written, real in paths.items():
        code = code.replace(written, str(real))
    return code


def captured(code: str, output: str) -> dict[str, str]:
    """The placeholders a line fills, from what it printed."""
    words = shlex.split(code)
    command = words[1:3] if words[:1] == ["recalld"] else []
    if command[:1] == ["put"]:
        assert "--json" in words, "the README's put line must ask for --json: its id is read from the answer"
        return {"ID": json.loads(output)["id"]}
    if command[:1] == ["recall"]:
        search = re.search(rf"^search ({UUID})", output, flags=re.M)
        result = re.search(rf"; id ({UUID})$", output, flags=re.M)
        assert search and result, "recall printed no search id or no result id"
        return {"SEARCH_ID": search.group(1), "RESULT_ID": result.group(1)}
    if command == ["disputes", "list"]:
        dispute = re.search(rf"^({UUID})\s.*\b{ENTITY}\b", output, flags=re.M)
        assert dispute, f"no dispute of {ENTITY} listed"
        return {"DISPUTE_ID": dispute.group(1)}
    return {}


# -- running


@dataclass
class Runner:
    """Runs examples in a prepared directory against one daemon, keeping the shell's exports."""

    cwd: Path
    env: dict[str, str]
    paths: dict[str, Path]
    values: dict[str, str]

    def run(self, example: Example, expect: Callable[[str], None] = lambda output: None) -> str:
        code = filled(example, self.values, self.paths)
        exported = self.cwd / "exported.env"
        if example.kind == "python":
            script = self.cwd / "example.py"
            script.write_text(code)
            command = [str(self.cwd / ".venv" / "bin" / "python"), str(script)]
        elif code.startswith("export "):
            # the environment after the line, for the lines that follow (each runs in a shell of its own)
            command = ["bash", "-c", f"set -eo pipefail\n{code}\nenv -0 > {shlex.quote(str(exported))}"]
        else:
            command = ["bash", "-c", f"set -eo pipefail\n{code}"]
        exported.unlink(missing_ok=True)
        try:
            done = subprocess.run(
                command, cwd=self.cwd, env=self.env, capture_output=True, text=True, timeout=LINE_TIMEOUT_S
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{example.where}: {code!r} ran past {LINE_TIMEOUT_S} s:\n{exc.output}") from None
        output = done.stdout + done.stderr
        print(f"$ {code}  [{example.where}, exit {done.returncode}]\n{output}")  # shown with a failure
        assert done.returncode == 0, f"{example.where}: {code!r} exited {done.returncode}:\n{output}"
        if exported.exists():
            entries = exported.read_bytes().decode().split("\0")
            self.env = dict(entry.split("=", 1) for entry in entries if "=" in entry)
        try:
            expect(done.stdout)
            self.values.update(captured(code, done.stdout) if example.kind == "sh" else {})
        except (AssertionError, ValueError, KeyError) as exc:
            raise AssertionError(f"{example.where}: {code!r}: {exc!r}\noutput:\n{output}") from None
        return output


def json_answer(output: str) -> None:
    """A curl line's body: curl exits 0 on an HTTP error, so the answer itself must not be one."""
    answer = json.loads(output)
    assert isinstance(answer, dict) and "error" not in answer, answer


def prepared(daemon: Daemon, scratch: Path) -> Runner:
    """The directory the examples run in, as the README assumes a checkout to be; `recalld` not
    on PATH until the README's export puts it there."""
    (scratch / ".venv").symlink_to(Path(sys.prefix))
    venv_bin = str(Path(sys.prefix) / "bin")
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env = {**os.environ, "PATH": path, "RECALLD_SOCKET": str(daemon.socket)}
    paths = {"/run/recalld/recalld.sock": daemon.socket, **{k: scratch / v for k, v in SCRATCH_PATHS.items()}}
    return Runner(scratch, env, paths, {"ENTITY": ENTITY})


@pytest.fixture
def scratch() -> Any:
    path = scratch_dir("recalld-readme-")  # traversable: restore's embedded server runs as another user
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_readme_runs_as_written(make_daemon: Any, scratch: Path) -> None:
    # the README moderates a dispute: two suppliers disagree, the resolver is not sure
    service = ChatService({"voltage": Reply(value="230 V", confidence=0.3)})
    with threaded_chat_server(service) as url:
        daemon = make_daemon(
            env={
                "RECALLD_ASSIGNMENTS_INTERVAL_S": "0.2",
                "RECALLD_RESOLVER_ENABLED": "true",
                "RECALLD_RESOLVER_URL": url,
                "RECALLD_RESOLVER_INTERVAL_S": "0.2",
            }
        )
        supplied = [
            {"entity": ENTITY, "characteristic": "voltage", "supplier": s, "value": v, "trust": 0.5}
            for s, v in (("acme", "230 V"), ("globex", "220 V"))
        ]
        assert daemon.call("POST", "/v1/observations", {"observations": supplied})[0] == 202
        runner = prepared(daemon, scratch)
        (scratch / "docs").mkdir()
        for name, text in CORPUS.items():
            (scratch / "docs" / name).write_text(text, encoding="latin-1")
        wait_for_moderation(daemon)

        ran = examples(ROOT / "README.md", "Use it")
        assert [e.kind for e in ran].count("python") >= 1 and len(ran) > 10, ran
        for example in ran:
            runner.run(example, json_answer if example.code.startswith("curl ") else lambda output: None)


def wait_for_moderation(daemon: Daemon, timeout: float = 60.0) -> None:
    """Until the resolver has answered ENTITY's dispute and left it in moderation."""
    eventually(
        lambda: daemon.call("GET", "/admin/disputes?state=manual_review")[1],
        timeout,
        f"a dispute of {ENTITY} in moderation",
        accept=lambda body: any(d["entity"] == ENTITY for d in body["disputes"]),
    )


def test_the_api_and_eval_docs_examples_run_as_written(make_daemon: Any, scratch: Path) -> None:
    daemon = make_daemon()
    runner = prepared(daemon, scratch)
    # as after the README's `export PATH=...`
    runner.env["PATH"] = os.pathsep.join([str(scratch / ".venv" / "bin"), runner.env["PATH"]])

    # docs/API.md: its curl commands are inline, in the introduction
    api = ROOT / "docs" / "API.md"
    curls = re.findall(r"`(curl [^`]+)`", api.read_text())
    assert curls, "docs/API.md shows no curl command"
    for curl in curls:
        runner.run(Example("sh", curl, f"{api.name} (inline)"), json_answer)

    # docs/EVAL.md: its golden set, made real, then evaluated as its example does
    doc = ROOT / "docs" / "EVAL.md"
    commands: list[Example] = []
    questions_file: Path | None = None
    layout, floor_example = "", None
    for info, body, first in fenced_blocks(doc.read_text()):
        where = f"{doc.name}:{first}"
        head = body.splitlines()[0]
        if info == "toml":
            named = re.fullmatch(r"# (\S+)", head)
            assert named, f"{where}: a TOML example names the file it is in its first line (`# PATH`)"
            questions_file = scratch / named.group(1)
            questions_file.parent.mkdir(parents=True, exist_ok=True)
            questions_file.write_text(body)
        elif info == "json":
            floor_example = json.loads(body)
        elif info == "" and head.endswith("/") and " " not in head:  # a golden set's layout
            layout = body
        elif info == "" and head.startswith("$ "):  # a command, then its output (another set's figures)
            commands.append(Example("sh", head.removeprefix("$ "), where))
        elif info == "" and all(line.startswith("recalld eval bench/golden/") for line in body.splitlines()):
            pass  # how the published figures were measured: corpora built from Debian packages, minutes each
        else:
            raise AssertionError(f"{where}: a block this test does not know: run it, or say why it is not")
    assert questions_file and layout and commands and floor_example, (questions_file, layout, commands)
    golden = questions_file.parent
    assert layout.startswith(f"{golden.name}/\n"), f"{doc.name}: the layout is not of {golden.name}/"
    corpus = golden / "corpus"
    named_files = re.findall(r"^ {4,}([\w/.-]+\.\w+)\b", layout, flags=re.M)  # the layout's corpus/ entries
    for question in tomllib.loads(questions_file.read_text())["question"]:
        expected = question["expected"]
        named_files += [expected] if isinstance(expected, str) else expected
    for name in named_files:
        if not any(corpus.glob(f"{name}*")):
            assert name in HANDBOOK, f"{doc.name} names the corpus file {name}: give it a text in HANDBOOK"
            (corpus / name).parent.mkdir(parents=True, exist_ok=True)
            (corpus / name).write_text(HANDBOOK[name])
    for command in commands:
        runner.run(command)
    assert (scratch / "handbook.png").stat().st_size > 0

    # the floor file, as the layout says `recalld eval --accept` writes it, has the example's shape
    accept = f"recalld eval {golden.name}/ --accept"
    runner.run(Example("sh", accept, f"{doc.name} (the layout's floor.json)"))
    written = json.loads((golden / "floor.json").read_text())
    assert written.keys() == floor_example.keys() and written["measure"] == floor_example["measure"], written
    assert written["floors"].keys() == floor_example["floors"].keys(), written  # the same space: the local model
    for space, floor in written["floors"].items():
        assert floor.keys() == floor_example["floors"][space].keys(), floor
