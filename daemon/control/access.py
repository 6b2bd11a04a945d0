"""Who is calling, and what they may do: peer credentials (SO_PEERCRED) mapped by config.

The socket's file mode (0660) is the first gate; this is the second, so that a local user who
can reach the socket still sees only the namespaces configured for them. Root and the daemon's
own user are administrators. TCP peers carry no credentials and get no rights at all.
"""

from __future__ import annotations

import grp
import os
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from recalld.config import AccessConfig
from recalld.wire.errors import ApiError, ErrorCode, not_found

_UCRED = struct.Struct("3i")  # pid, uid, gid


@dataclass(frozen=True)
class Peer:
    pid: int | None
    uid: int | None
    gid: int | None


def peer_of(sock: socket.socket | None) -> Peer:
    """Credentials of the process at the other end of a Unix stream socket."""
    if sock is None or sock.family != socket.AF_UNIX:
        return Peer(None, None, None)
    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return Peer(pid, uid, gid)


def _principals(peer: Peer) -> set[str]:
    """The names a peer matches in config: its uid and each of its groups as "@name"."""
    if peer.uid is None:
        return set()
    names = {str(peer.uid)}
    gids = {peer.gid} if peer.gid is not None else set()
    try:
        import pwd

        user = pwd.getpwuid(peer.uid).pw_name
        names.add(user)
        gids |= {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    except KeyError:
        pass
    for gid in gids:
        try:
            names.add("@" + grp.getgrgid(gid).gr_name)
        except KeyError:
            names.add(f"@{gid}")
    return names


PRINCIPALS_TTL_S = 10.0
"""How long a peer's names (user, groups) are reused: reading the group database took 0.25 ms
with a 48-line /etc/group (far more through LDAP), and a request asked for it up to six times.
A change of group membership takes effect within this long."""


class AccessPolicy:
    def __init__(
        self,
        config: AccessConfig,
        *,
        resolve: Callable[[Peer], set[str]] = _principals,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._own_uid = os.geteuid()
        self._resolve = resolve
        self._clock = clock
        self._known: dict[tuple[int, int | None], tuple[float, frozenset[str]]] = {}

    def _names(self, peer: Peer) -> frozenset[str]:
        """The peer's principals, resolved at most once per PRINCIPALS_TTL_S per (uid, gid)."""
        if peer.uid is None:
            return frozenset()
        key, now = (peer.uid, peer.gid), self._clock()
        known = self._known.get(key)
        if known is not None and now < known[0]:
            return known[1]
        if len(self._known) >= 1024:  # bounded: a crowd of users only costs lookups again
            self._known.clear()
        names = frozenset(self._resolve(peer))
        self._known[key] = (now + PRINCIPALS_TTL_S, names)
        return names

    def is_admin(self, peer: Peer) -> bool:
        if peer.uid is None:
            return False
        if peer.uid in (0, self._own_uid):
            return True
        return bool(self._names(peer) & set(self._config.admins))

    def _allowed(self, peer: Peer, table: dict[str, list[str]], namespace: str) -> bool:
        if self.is_admin(peer):
            return True
        for name in self._names(peer):
            spaces = table.get(name, [])
            if "*" in spaces or namespace in spaces:
                return True
        return False

    def readable_namespaces(self, peer: Peer) -> frozenset[str] | None:
        """The namespaces the peer may read, for answers that count across namespaces; None
        when it may read every one (an administrator, or granted "*")."""
        if self.is_admin(peer):
            return None
        names = self._names(peer)
        granted = {
            space
            for table in (self._config.readers, self._config.writers)
            for name in names
            for space in table.get(name, [])
        }
        return None if "*" in granted else frozenset(granted)

    def require_admin(self, peer: Peer) -> None:
        if not self.is_admin(peer):
            raise ApiError(403, ErrorCode.FORBIDDEN, "this operation needs administrator rights")

    def may_read(self, peer: Peer, namespace: str) -> bool:
        # writers may read what they write
        return self._allowed(peer, self._config.readers, namespace) or self._allowed(
            peer, self._config.writers, namespace
        )

    # The refusals below name no namespace: a name that came from the store (a record's, a
    # search's) must not reach a caller who may not read it, and one the caller sent it knows.

    def require_read(self, peer: Peer, namespace: str) -> None:
        """For a namespace the request names: 403 when the peer may not read it."""
        if not self.may_read(peer, namespace):
            raise ApiError(403, ErrorCode.FORBIDDEN, "no read access to this namespace")

    def require_write(self, peer: Peer, namespace: str) -> None:
        if not self._allowed(peer, self._config.writers, namespace):
            raise ApiError(403, ErrorCode.FORBIDDEN, "no write access to this namespace")

    def require_visible(self, peer: Peer, namespace: str, what: str) -> None:
        """For a thing found by its id (a record, a search) in `namespace`: one the peer may not
        read is answered exactly as an id that does not exist, `not_found(what)`, so that
        probing ids tells nothing of other namespaces: not their names, not what they hold."""
        if not self.may_read(peer, namespace):
            raise not_found(what)

    def may_connect(self, peer: Peer) -> bool:
        """A peer with no configured right at all is refused before its request is read."""
        if self.is_admin(peer):
            return True
        return bool(self._names(peer) & (set(self._config.readers) | set(self._config.writers)))
