"""The `recalld` command in a pseudo-terminal, as a person runs it: its stdout and stderr a
terminal (progress bars drawn, colours on), and Ctrl-C typed on that terminal."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from collections.abc import Callable

from tests.support import ROOT, Daemon


def in_terminal(
    daemon: Daemon | None,
    *args: str,
    interrupt_when: Callable[[int, str], bool] | None = None,
    timeout_s: float = 120,
) -> tuple[int, str]:
    """Run `recalld ARGS` in a pseudo-terminal of its own, talking to `daemon` (or to none); with
    `interrupt_when`, type Ctrl-C once it holds for the process id and the output so far (the
    terminal sends SIGINT to its whole foreground process group). Returns the exit status and
    everything the command wrote; a command still running after `timeout_s` is killed and fails
    the test."""
    env = {k: v for k, v in os.environ.items() if k != "RECALLD_SOCKET"} | {"TERM": "xterm"}
    if daemon is not None:
        env["RECALLD_SOCKET"] = str(daemon.socket)
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own, the terminal its controlling one
        os.chdir(ROOT)
        # As an interactive shell starts a command in the foreground: with Ctrl-C's default
        # disposition. The test itself may run with SIGINT ignored (a CI job started in the
        # background by a shell without job control), and an ignored signal stays ignored across
        # exec: Python would then install no KeyboardInterrupt at all.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(sys.executable, [sys.executable, "-m", "recalld", *args], env)
    output, typed = b"", False
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if interrupt_when is not None and not typed and interrupt_when(pid, output.decode(errors="replace")):
                os.write(fd, b"\x03")
                typed = True
            ready, _, _ = select.select([fd], [], [], 0.1)  # reading the terminal, not a barrier
            if not ready:
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            output += data
        else:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"still running after {timeout_s} s: {output.decode(errors='replace')[-2000:]}")
    finally:
        os.close(fd)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")
