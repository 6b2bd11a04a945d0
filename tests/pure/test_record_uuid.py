"""actors/index/idmap.py's record_uuid builds the same UUID as uuid.UUID(bytes=...), without its
checks: equal, equally hashed, ordered, printed, pickled and encoded, for edge and random ids."""

from __future__ import annotations

import os
import pickle
import uuid

import msgspec
import pytest

from actors.index.idmap import record_uuid

EDGES = [bytes(16), b"\xff" * 16, b"\x00" * 15 + b"\x01", b"\x80" + bytes(15), uuid.uuid4().bytes]


@pytest.mark.parametrize("raw", EDGES + [os.urandom(16) for _ in range(20)])
def test_record_uuid_is_the_checked_constructors_uuid(raw: bytes) -> None:
    fast, checked = record_uuid(raw), uuid.UUID(bytes=raw)
    assert type(fast) is uuid.UUID
    assert fast == checked and hash(fast) == hash(checked)
    assert (fast.int, fast.bytes, str(fast), fast.is_safe) == (
        checked.int,
        checked.bytes,
        str(checked),
        checked.is_safe,
    )
    assert pickle.loads(pickle.dumps(fast)) == checked
    assert msgspec.json.encode(fast) == msgspec.json.encode(checked)
    assert not fast < checked and not checked < fast
