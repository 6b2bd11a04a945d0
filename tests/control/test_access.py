"""Access by peer credentials: who may connect, read, write, administer; and how long a peer's
names (read from this machine's user and group databases) are reused."""

from __future__ import annotations

import grp
import os
import pwd
from collections.abc import Callable

import pytest

from recalld.config import AccessConfig
from recalld.control.access import PRINCIPALS_TTL_S, AccessPolicy, Peer, _principals
from recalld.wire.errors import ApiError

NOBODY = Peer(pid=1, uid=65534, gid=65534)
NOBODY_GROUP = "@" + grp.getgrgid(65534).gr_name


def forbidden(call: Callable[..., None], *args: object) -> bool:
    try:
        call(*args)
    except ApiError as error:
        return error.status == 403
    return False


def test_root_and_the_daemons_own_user_are_administrators() -> None:
    policy = AccessPolicy(AccessConfig())
    assert policy.is_admin(Peer(1, 0, 0)) and policy.is_admin(Peer(1, os.geteuid(), os.getegid()))
    assert not policy.is_admin(NOBODY) and not policy.is_admin(Peer(None, None, None))


def test_an_unconfigured_user_may_not_even_connect() -> None:
    policy = AccessPolicy(AccessConfig(readers={"1000": ["ns1"]}))
    assert not policy.may_connect(NOBODY)
    assert forbidden(policy.require_read, NOBODY, "ns1")


def test_readers_read_their_namespaces_only_and_write_nothing() -> None:
    policy = AccessPolicy(AccessConfig(readers={"65534": ["ns1"]}))
    assert policy.may_connect(NOBODY)
    policy.require_read(NOBODY, "ns1")
    assert forbidden(policy.require_read, NOBODY, "ns2")
    assert forbidden(policy.require_write, NOBODY, "ns1")
    assert forbidden(policy.require_admin, NOBODY)


def test_writers_may_read_what_they_write_and_groups_and_names_count() -> None:
    policy = AccessPolicy(AccessConfig(writers={pwd.getpwuid(65534).pw_name: ["ns1"], NOBODY_GROUP: ["*"]}))
    policy.require_write(NOBODY, "ns1")
    policy.require_read(NOBODY, "ns1")
    policy.require_write(NOBODY, "anything")  # through the group's "*"
    assert AccessPolicy(AccessConfig(admins=[NOBODY_GROUP])).is_admin(NOBODY)


@pytest.mark.parametrize("later", [0.0, PRINCIPALS_TTL_S / 2])
def test_a_peers_names_are_read_once_within_the_ttl(later: float) -> None:
    now = [100.0]
    lookups: list[Peer] = []

    def resolve(peer: Peer) -> set[str]:
        lookups.append(peer)
        return _principals(peer)

    policy = AccessPolicy(AccessConfig(readers={"65534": ["ns1"]}), resolve=resolve, clock=lambda: now[0])
    assert policy.may_connect(NOBODY)
    now[0] += later
    policy.require_read(NOBODY, "ns1")
    assert forbidden(policy.require_write, NOBODY, "ns1")
    assert lookups == [NOBODY]  # one lookup for the whole request, and the next within the TTL
    now[0] += PRINCIPALS_TTL_S
    assert policy.may_connect(NOBODY)
    assert lookups == [NOBODY, NOBODY]  # then read again: a changed membership takes effect
