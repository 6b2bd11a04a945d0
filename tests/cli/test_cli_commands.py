"""The CLI's one shape (daemon/cli/commands.py): every command a user can type is in the dispatch
table, and runs in the module that registered it; a client command that gets an answer no daemon
gives ends in one line, not a traceback."""

from __future__ import annotations

import ast
import http.server
import importlib
import io
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from recalld.cli import commands, parser
from recalld.cli.output import Output
from tests.support import ROOT


def names(sub: parser.Subparsers) -> list[str]:
    return list(sub.choices)


def test_every_command_the_parser_offers_is_in_the_dispatch_table() -> None:
    _, sub = parser.root("recalld")
    for group in dict.fromkeys(commands.COMMANDS.values()):
        group.register(sub)
    assert names(sub) == list(commands.COMMANDS), "each command once, in the table's order"


@pytest.mark.parametrize("group", list(dict.fromkeys(commands.COMMANDS.values())), ids=lambda m: m.__name__)
def test_each_group_registers_exactly_the_commands_the_table_sends_it(group: commands.CommandGroup) -> None:
    _, sub = parser.root("recalld")
    group.register(sub)
    assert names(sub) == [name for name, owner in commands.COMMANDS.items() if owner is group]


def test_every_module_that_registers_commands_is_in_the_table() -> None:
    """A command group left out of the table would register nothing: its commands unreachable."""
    folder = ROOT / "daemon" / "cli"
    registering = sorted(
        f"recalld.cli.{path.stem}"
        for path in folder.glob("*.py")
        if any(
            isinstance(node, ast.FunctionDef) and node.name == "register" for node in ast.parse(path.read_text()).body
        )
    )
    assert registering, "no module of daemon/cli/ registers commands"
    assert registering == sorted({group.__name__ for group in commands.COMMANDS.values()})
    for name in registering:  # and each in the one shape, which mypy checks for the table's
        module = importlib.import_module(name)
        assert callable(module.register) and callable(module.run), name


class _Forged(http.server.BaseHTTPRequestHandler):
    """Answers a create with a 201 whose body is not the daemon's answer."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"id": "forged"}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # a Unix peer has no address to log
        pass


@pytest.fixture
def forger(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "recalld.sock"
    server = socketserver.UnixStreamServer(str(path), _Forged)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path
    server.shutdown()
    server.server_close()


def test_an_answer_that_is_not_the_daemons_is_one_line(forger: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    args = commands.build_parser().parse_args(["--socket", str(forger), "put", "-n", "notes", "--title", "t"])
    code = commands.COMMANDS[args.command].run(args, Output(out, err))
    assert code == 1 and out.getvalue() == ""
    assert err.getvalue().startswith(f"recalld: the answer from {forger} is not one recalld can read: "), err
    assert len(err.getvalue().splitlines()) == 1
