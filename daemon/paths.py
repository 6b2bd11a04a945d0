"""Default locations, following systemd's and XDG's conventions (one place for both daemon and CLI)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

SOCKET_NAME = "recalld.sock"


def default_socket(environ: Mapping[str, str] = os.environ) -> Path:
    """`$RUNTIME_DIRECTORY` under systemd, else the per-user runtime dir, else /run or /tmp."""
    if environ.get("RUNTIME_DIRECTORY"):
        return Path(environ["RUNTIME_DIRECTORY"].split(":")[0]) / SOCKET_NAME
    if environ.get("XDG_RUNTIME_DIR"):
        return Path(environ["XDG_RUNTIME_DIR"]) / "recalld" / SOCKET_NAME
    if os.geteuid() == 0:
        return Path("/run/recalld") / SOCKET_NAME
    return _tmp_runtime_dir() / SOCKET_NAME


def _tmp_runtime_dir() -> Path:
    """A user's runtime directory when the session manager gives none."""
    return Path(f"/tmp/recalld-{os.geteuid()}")


def default_data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """`$STATE_DIRECTORY` under systemd, else `$XDG_STATE_HOME/recalld`, /var/lib/recalld for root."""
    if environ.get("STATE_DIRECTORY"):
        return Path(environ["STATE_DIRECTORY"].split(":")[0])
    if environ.get("XDG_STATE_HOME"):
        return Path(environ["XDG_STATE_HOME"]) / "recalld"
    if os.geteuid() == 0:
        return Path("/var/lib/recalld")
    return Path.home() / ".local" / "state" / "recalld"


def default_cache_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """`$CACHE_DIRECTORY` under systemd, else `$XDG_CACHE_HOME/recalld`, /var/cache/recalld for
    root, else ~/.cache/recalld: what a start may reuse from the last one, never data."""
    if environ.get("CACHE_DIRECTORY"):
        return Path(environ["CACHE_DIRECTORY"].split(":")[0])
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "recalld"
    if os.geteuid() == 0:
        return Path("/var/cache/recalld")
    return Path.home() / ".cache" / "recalld"


def client_socket(explicit: str | None, environ: Mapping[str, str] = os.environ) -> Path:
    """What the CLI connects to: `--socket`, then `RECALLD_SOCKET`, then the default path."""
    if explicit:
        return Path(explicit)
    if environ.get("RECALLD_SOCKET"):
        return Path(environ["RECALLD_SOCKET"])
    return default_socket(environ)


# -- the socket's directory


class UnsafeRuntimeDirectory(PermissionError):
    """The socket's directory would let another user stand in for the daemon: put their own
    socket where clients connect, and read what they send."""


def private_runtime_dirs(environ: Mapping[str, str] = os.environ) -> set[Path]:
    """The per-user directories recalld makes for itself, 0700, in places others can write to
    (/tmp) or that the session manager gives each user: only their owner may use them."""
    private = {_tmp_runtime_dir()}
    if environ.get("XDG_RUNTIME_DIR"):
        private.add(Path(environ["XDG_RUNTIME_DIR"]) / "recalld")
    return private


def check_socket_dir(directory: Path, *, binding: bool, environ: Mapping[str, str] = os.environ) -> None:
    """Raise `UnsafeRuntimeDirectory` unless a socket in `directory` is safe to listen on
    (`binding`) or to connect to. docs/OPERATIONS.md ("The runtime directory") states the rule:

    - recalld's own per-user directories (`private_runtime_dirs`) must be real directories, not
      symbolic links, owned by the caller and writable by no one else, as ssh-agent and tmux
      demand of theirs: anyone may have created /tmp/recalld-$UID first.
    - Any other directory (systemd's /run/recalld, an explicit --socket or RECALLD_SOCKET) is
      the operator's choice and may belong to the daemon's account; but no one except its owner
      may write to it (whoever can write there can replace the socket), unless it is sticky and
      owned by the caller or root, like /tmp; then `check_socket_file` checks the socket's owner.
      The daemon also binds only in a directory that it or root owns.

    FileNotFoundError when `directory` does not exist.
    """
    euid = os.geteuid()
    private = directory in private_runtime_dirs(environ)
    st = os.lstat(directory) if private else os.stat(directory)

    def refuse(why: str) -> UnsafeRuntimeDirectory:
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid == euid and not private and st.st_mode & 0o022:
            # the caller's own directory, only too open: how to close it, not an alarm
            return UnsafeRuntimeDirectory(
                f"not using the socket directory {directory} (yours, mode {mode:04o}): {why}. "
                f"`chmod go-w {directory}` closes it, or name a socket path in another directory"
            )
        return UnsafeRuntimeDirectory(
            f"refusing the socket directory {directory} (owner uid {st.st_uid}, mode {mode:04o}): {why}; "
            "another user could stand in for recalld there. Remove it, or name a safe socket path"
        )

    if stat.S_ISLNK(st.st_mode):
        raise refuse("it is a symbolic link")
    if not stat.S_ISDIR(st.st_mode):
        raise refuse("it is not a directory")
    trusted = st.st_uid in (euid, 0)
    if private and st.st_uid != euid:
        raise refuse(f"it is owned by uid {st.st_uid}, not by you (uid {euid})")
    if private and st.st_mode & 0o022:
        raise refuse("group or others can write to it")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        # without the sticky bit, whoever may write to the directory may replace the socket
        raise refuse("group or others can write to it and replace the socket")
    if st.st_mode & 0o022 and not trusted:
        raise refuse(f"it is owned by uid {st.st_uid} and group or others can write to it")
    if binding and not trusted:
        raise refuse(f"it is owned by uid {st.st_uid}, who could replace the daemon's socket")


def check_socket_file(socket_path: Path) -> None:
    """Raise `UnsafeRuntimeDirectory` unless `socket_path` is a socket owned by the caller, root
    or the owner of its directory: in a sticky directory such as /tmp anyone may create the name
    while the daemon is down. FileNotFoundError when there is no socket."""
    st = os.lstat(socket_path)
    owner = os.stat(socket_path.parent).st_uid
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid not in (os.geteuid(), 0, owner):
        raise UnsafeRuntimeDirectory(
            f"refusing {socket_path}: it is {'a socket' if stat.S_ISSOCK(st.st_mode) else 'no socket'} "
            f"owned by uid {st.st_uid}, neither you, root nor the owner of its directory; another user could "
            "stand in for recalld there"
        )


def make_parents(path: Path) -> None:
    """Make the missing directories above `path` as `mkdir -p` would under the usual umask
    (0755): they hold nothing of ours, and whoever may use `path` has to pass through them
    (under the daemon's own umask they would be 0700)."""
    for parent in [p for p in reversed(path.parents) if not p.exists()]:
        with contextlib.suppress(FileExistsError):
            parent.mkdir()
            parent.chmod(0o755)


def make_socket_dir(directory: Path, socket_mode: int, environ: Mapping[str, str] = os.environ) -> None:
    """Create the daemon's socket directory if missing (private ones 0700; others open to the
    group and others as far as the socket's own mode is), then check it as `check_socket_dir`."""
    if directory in private_runtime_dirs(environ):
        mode = 0o700
    else:
        mode = 0o700 | (0o050 if socket_mode & 0o070 else 0) | (0o005 if socket_mode & 0o007 else 0)
    make_parents(directory)
    try:
        directory.mkdir(mode=mode)
    except FileExistsError:
        pass  # someone's, maybe not ours: the check below decides
    else:
        os.chmod(directory, mode)  # exactly: mkdir's mode passes through the umask
    check_socket_dir(directory, binding=True, environ=environ)
