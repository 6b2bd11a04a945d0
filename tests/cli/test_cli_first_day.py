"""The `recalld` command as a new user first meets it: a query that looks like an option, a
misspelled flag or command, no daemon where it looks, the answer of `put`, output cut short by
`head`, and Ctrl-C while the daemon starts. The real executable, in a subprocess, against a real
daemon."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from recalld.cli import EXIT_INTERRUPTED
from tests.support import ROOT, Daemon, scratch_dir
from tests.support.cli import recalld
from tests.support.terminal import in_terminal


def test_a_query_that_starts_with_a_dash_goes_after_double_dash(daemon: Daemon, ns: str) -> None:
    title = "--require-hashes"
    assert (
        daemon.call("POST", "/v1/records", {"namespace": ns, "kind": "note", "title": title, "body": "pip"})[0] == 201
    )
    found = recalld(daemon, "recall", "-n", ns, "--", title)
    assert found.returncode == 0 and title in found.stdout, (found.stdout, found.stderr)
    asked = recalld(daemon, "recall", "-n", ns, title)
    assert asked.returncode == 2
    assert "to search for --require-hashes, put it after --" in asked.stderr, asked.stderr


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["recall", "--namspace", "docs", "query"], "--namspace: did you mean --namespace?"),
        (["recal", "query"], "recal: did you mean recall?"),
        (["recall", "-n", "docs", "--route", "vectr", "query"], "vectr: did you mean vector?"),
        (["generations", "--rebuidl"], "--rebuidl: did you mean --rebuild?"),
    ],
)
def test_a_misspelled_flag_command_or_choice_gets_the_closest(args: list[str], hint: str) -> None:
    done = recalld(None, *args)
    assert done.returncode == 2 and hint in done.stderr, done.stderr


def test_no_daemon_says_what_to_do_and_where_it_looked(tmp_path: Path) -> None:
    gone = tmp_path / "gone.sock"
    done = recalld(None, "--socket", str(gone), "health")
    assert done.returncode == 1
    assert f"tried {gone} (--socket)" in done.stderr and "recalld serve" in done.stderr, done.stderr
    assert "RECALLD_SOCKET" in done.stderr
    done = recalld(None, "health", env={"RECALLD_SOCKET": str(gone)})
    assert f"tried {gone} ($RECALLD_SOCKET)" in done.stderr, done.stderr


def test_a_socket_in_ones_own_directory_is_no_alarm(tmp_path: Path) -> None:
    """Your own directory, open to others: with no socket in it, the daemon is simply not there;
    with one, the refusal says how to close the directory, not that someone is impersonating."""
    own = tmp_path / "open"
    own.mkdir()
    own.chmod(0o777)
    done = recalld(None, "--socket", str(own / "r.sock"), "health")
    assert done.returncode == 1 and "no such socket" in done.stderr and "refusing" not in done.stderr, done.stderr
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(own / "r.sock"))
    try:
        done = recalld(None, "--socket", str(own / "r.sock"), "health")
    finally:
        listener.close()
    assert done.returncode == 1 and f"chmod go-w {own}" in done.stderr, done.stderr
    assert "stand in" not in done.stderr, done.stderr


def test_put_answers_in_one_line_and_in_json_when_asked(daemon: Daemon, ns: str) -> None:
    plain = recalld(daemon, "put", "-n", ns, "--title", "Pager rota", "--body", "One engineer a week.")
    assert plain.returncode == 0, plain.stderr
    [line] = plain.stdout.splitlines()
    assert line.startswith("created ") and "(revision 1)" in line, line
    record = line.split()[1]
    assert recalld(daemon, "get", record).returncode == 0
    as_json = recalld(daemon, "put", "-n", ns, "--id", record, "--title", "Pager rota", "--body", "Two.", "--json")
    assert '"revision": 2' in as_json.stdout, as_json.stdout
    same = recalld(daemon, "put", "-n", ns, "--id", record, "--title", "Pager rota", "--body", "Two.")
    assert same.stdout.startswith(f"unchanged {record} (revision 2)"), same.stdout


def test_output_cut_short_by_head_ends_quietly(daemon: Daemon, ns: str) -> None:
    body = "\n".join(f"line {i} of a long runbook" for i in range(100_000))
    status, created = daemon.call(
        "POST", "/v1/records", {"namespace": ns, "kind": "doc", "title": "Long", "body": body}
    )
    assert status == 201, created
    piped = subprocess.run(
        f"{sys.executable} -m recalld get {created['id']} | head -n 2",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "RECALLD_SOCKET": str(daemon.socket)},
    )
    assert piped.returncode == 0 and len(piped.stdout.splitlines()) == 2
    assert piped.stderr == "", piped.stderr


def importing_the_cli(pid: int) -> bool:
    """The child is importing the CLI: msgspec's compiled module, which the CLI's first imports
    load, is mapped into it. Earlier than that, the interpreter itself is starting (runpy looking
    for the module), and a Ctrl-C there is Python's own traceback, the same for any Python
    program, before a line of recalld has run. The child must have become `python -m recalld`
    first: until its exec, it is a copy of this test process, msgspec included, and a signal it
    takes then is lost in the exec."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        return b"\0-m\0recalld\0" in command and b"msgspec" in Path(f"/proc/{pid}/maps").read_bytes()
    except FileNotFoundError:
        return False


def initdb_running(pid: int) -> bool:
    """initdb runs in the child's process group (the terminal's foreground group): Ctrl-C reaches
    it too, and it fails."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.getpgid(int(proc.name)) == pid:
                program = (proc / "cmdline").read_bytes().split(b"\0")[0]
                if program.rsplit(b"/", 1)[-1] == b"initdb":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            continue
    return False


# The moments a Ctrl-C can come while `recalld serve` starts, told by the process and what it has
# printed so far: while Python imports the CLI, while initdb makes the embedded PostgreSQL's cluster,
# while it starts, once ready.
MOMENTS: dict[str, Callable[[int, str], bool]] = {
    "importing": lambda pid, output: importing_the_cli(pid),
    "initdb running": lambda pid, output: initdb_running(pid),
    "postgres starting": lambda pid, output: "initialised the embedded PostgreSQL" in output,
    "ready": lambda pid, output: "recalld ready" in output,
}


@pytest.mark.parametrize("moment", list(MOMENTS))
def test_ctrl_c_while_the_daemon_starts_prints_no_traceback(moment: str) -> None:
    """Ctrl-C typed in the daemon's terminal (SIGINT to its whole foreground process group, the
    embedded PostgreSQL included) ends `recalld serve` without a traceback, whenever it comes,
    and leaves no process behind."""
    home = scratch_dir("recalld-test-ctrl-c-")
    try:
        serve = ["serve", "--data-dir", str(home / "data"), "--socket", str(home / "r.sock")]
        code, output = in_terminal(None, *serve, interrupt_when=MOMENTS[moment])
        assert "Traceback" not in output, output[-3000:]
        # 130 as the CLI exits, or ended by SIGINT (a shell reports it as 130 too): CPython ends
        # itself so when it once saw the interrupt unhandled, as it can while an extension module
        # being imported runs Python code of its own
        assert code in (0, EXIT_INTERRUPTED, -signal.SIGINT), (code, output[-2000:])
        left = subprocess.run(["pgrep", "-f", str(home)], capture_output=True, text=True).stdout
        assert left == "", f"processes left behind: {left}"
    finally:
        shutil.rmtree(home, ignore_errors=True)
