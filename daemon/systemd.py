"""Talk to systemd without libsystemd: readiness notifications, the watchdog, socket activation.

A pure-Python take on sd_notify(3), sd_watchdog_enabled(3) and sd_listen_fds(3). Outside
systemd every call here is a cheap no-op, so the daemon calls them unconditionally. Nothing
here raises because systemd is absent or gone: a failed send is logged at debug and dropped.
A malformed `NOTIFY_SOCKET` is a deployment mistake, so it is reported once, as a warning.

Typical use in `recalld serve`::

    notifier = Notifier.from_environ()  # first, before any child process starts
    inherited = listen_fds()            # socket activation: [3] or []
    notifier.status("applying migrations")
    ...
    notifier.ready("serving")
    interval = watchdog_interval()      # ping every `interval` seconds, or never if None
    ...
    notifier.stopping()
"""

from __future__ import annotations

import logging
import math
import os
import socket
from types import TracebackType

__all__ = ["SD_LISTEN_FDS_START", "Notifier", "listen_fds", "watchdog_interval"]

log = logging.getLogger(__name__)

# The first inherited fd in socket activation; fixed by the sd_listen_fds(3) protocol.
SD_LISTEN_FDS_START = 3

# sizeof(sun_path) on Linux: a path needs room for its NUL, an abstract name may use it all.
_SUN_PATH_MAX = 108


def _parse_notify_address(raw: str) -> str | bytes | None:
    """Turn a `NOTIFY_SOCKET` value into a socket address, or None when we cannot use it.

    `/path` is a filesystem socket; `@name` is Linux's abstract namespace, spelled with a leading
    NUL byte. Anything else (a relative path, systemd 254's `vsock:` form) is not supported here.
    """
    if raw.startswith("/"):
        return raw if len(os.fsencode(raw)) < _SUN_PATH_MAX else None
    if raw.startswith("@") and len(raw) > 1:
        abstract = b"\0" + os.fsencode(raw[1:])
        return abstract if len(abstract) <= _SUN_PATH_MAX else None
    return None


class Notifier:
    """Sends sd_notify(3) state changes to the service manager over `NOTIFY_SOCKET`.

    Each method sends one datagram, so the assignments in it reach systemd together or not at
    all. Sends never block the caller (the socket is non-blocking: if systemd's queue is full
    the notification is dropped and logged rather than stalling the event loop) and never
    raise because systemd is absent. A `Notifier` without an address does nothing; `enabled`
    says which kind this is. Safe to use from one thread at a time; `close()` is idempotent.
    """

    def __init__(self, address: str | bytes | None) -> None:
        self._address = address
        self._sock: socket.socket | None = None

    @classmethod
    def from_environ(cls, *, unset_environment: bool = True) -> Notifier:
        """Build a notifier from `NOTIFY_SOCKET`; without it, one that does nothing.

        By default the variable is removed from `os.environ` afterwards, like
        sd_notify(unset_environment=1): child processes (the embedded PostgreSQL) must not
        inherit it, or they would announce readiness on our behalf. Call this before starting
        any child. A malformed value is reported once here and the notifier stays silent.
        """
        raw = os.environ.get("NOTIFY_SOCKET", "")
        if unset_environment:
            os.environ.pop("NOTIFY_SOCKET", None)
        if not raw:
            log.debug("NOTIFY_SOCKET is not set; systemd notifications are off")
            return cls(None)
        address = _parse_notify_address(raw)
        if address is None:
            log.warning(
                "NOTIFY_SOCKET=%r is not an absolute path or @abstract name that fits in sun_path; "
                "systemd notifications are off",
                raw,
            )
        return cls(address)

    @property
    def enabled(self) -> bool:
        """True when there is a service manager to talk to."""
        return self._address is not None

    def ready(self, status: str | None = None) -> None:
        """Tell systemd that start-up finished: `READY=1`, with an optional `STATUS=` line.

        Under `Type=notify` the unit is "active" only after this, and dependants start then.
        """
        self._send("READY=1", *self._status_field(status))

    def status(self, text: str) -> None:
        """Set the one-line status `systemctl status` shows (`STATUS=`)."""
        self._send(*self._status_field(text))

    def watchdog(self) -> None:
        """Ping the watchdog (`WATCHDOG=1`); see `watchdog_interval()` for how often."""
        self._send("WATCHDOG=1")

    def stopping(self, status: str | None = None) -> None:
        """Tell systemd that shutdown began (`STOPPING=1`), with an optional `STATUS=` line."""
        self._send("STOPPING=1", *self._status_field(status))

    def extend_timeout(self, seconds: float) -> None:
        """Ask for `seconds` more before the current start/stop timeout fires (`EXTEND_TIMEOUT_USEC=`).

        The extension counts from now, not from the old deadline, so a long step (a first model
        download, a big generation load) sends this periodically, each time with some margin.
        Raises ValueError for a negative or non-finite value: that is a bug, not an absent systemd.
        """
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"extend_timeout needs a finite, non-negative number of seconds, not {seconds!r}")
        self._send(f"EXTEND_TIMEOUT_USEC={round(seconds * 1_000_000)}")

    def close(self) -> None:
        """Release the socket. Later calls become no-ops."""
        self._address = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> Notifier:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @staticmethod
    def _status_field(text: str | None) -> tuple[str, ...]:
        if text is None:
            return ()
        # The datagram is newline-separated assignments: a newline in the text would end
        # STATUS= early and let the rest be read as another assignment (e.g. READY=1).
        return ("STATUS=" + " ".join(text.splitlines()),)

    def _send(self, *fields: str) -> None:
        if self._address is None or not fields:
            return
        message = "\n".join(fields).encode("utf-8", "replace")
        try:
            if self._sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sock.setblocking(False)
                self._sock = sock
            self._sock.sendto(message, self._address)
        except OSError as exc:
            # systemd gone, restarting, or its queue full: the daemon carries on regardless.
            log.debug("sd_notify %r to %r failed: %s", message, self._address, exc)


def watchdog_interval() -> float | None:
    """Seconds between `WATCHDOG=1` pings, or None when systemd expects none.

    Reads `WATCHDOG_USEC` (set from `WatchdogSec=`) and returns half of it, the margin
    sd_watchdog_enabled(3) recommends. When `WATCHDOG_PID` is set it must be our pid: the
    variables may have leaked to a child that systemd is not watching. Garbage yields None.
    """
    raw_usec = os.environ.get("WATCHDOG_USEC")
    if not raw_usec:
        return None
    raw_pid = os.environ.get("WATCHDOG_PID")
    if raw_pid:
        try:
            if int(raw_pid) != os.getpid():
                return None
        except ValueError:
            log.debug("ignoring unparsable WATCHDOG_PID=%r", raw_pid)
            return None
    try:
        usec = int(raw_usec)
    except ValueError:
        log.debug("ignoring unparsable WATCHDOG_USEC=%r", raw_usec)
        return None
    if usec <= 0:
        return None
    return usec / 2 / 1_000_000


def listen_fds() -> list[int]:
    """The listening sockets systemd passed us (socket activation): `[3, 4, ...]`, or `[]`.

    Only when `LISTEN_PID` is our pid: otherwise the variables were inherited by mistake and the
    fds are not ours. Like sd_listen_fds(unset_environment=1), `LISTEN_PID`, `LISTEN_FDS` and
    `LISTEN_FDNAMES` are removed from `os.environ` whatever the outcome, and the returned fds
    are marked close-on-exec so child processes do not inherit the listening socket. The
    caller owns the fds (e.g. `socket.socket(fileno=fd)`); call this once, early.
    """
    try:
        raw_pid = os.environ.get("LISTEN_PID")
        raw_fds = os.environ.get("LISTEN_FDS")
        if not raw_pid or not raw_fds:
            return []
        try:
            pid, count = int(raw_pid), int(raw_fds)
        except ValueError:
            log.warning("ignoring unparsable LISTEN_PID=%r / LISTEN_FDS=%r", raw_pid, raw_fds)
            return []
        if pid != os.getpid():
            log.debug("LISTEN_PID=%d is not our pid %d; no inherited sockets", pid, os.getpid())
            return []
        if count <= 0:
            return []
        fds = list(range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count))
        try:
            for fd in fds:
                os.set_inheritable(fd, False)
        except OSError as exc:
            log.warning("LISTEN_FDS=%d but fd %d is unusable (%s); ignoring inherited sockets", count, fd, exc)
            return []
        return fds
    finally:
        for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(name, None)
