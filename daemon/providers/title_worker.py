"""The title model's own process: `python -m recalld.providers.title_worker --fd N [--cache DIR]`.

The title model's forward pass is numpy on small arrays, run from Python one operation at a time,
so it holds the interpreter's lock for most of its 2 ms. Run in a thread of the daemon it stalled
the event loop for as long: a create's write, a batch's writes and other checks all waited on it
(docs/BENCHMARKS.md, "Writes with the duplicate check and indexing"). In a process of its own it
runs beside them on another core. `TitleModelProcess` (`title_process.py`) starts and speaks to it.

The two speak over one connected Unix socket (inherited as file descriptor N), in frames: a
4-byte little-endian length, then a msgpack array.

- The worker's first frame, once the model is loaded: `[0, null, null]`, or `[0, null, "why"]`
  when it could not load (it then exits).
- A request: `[id, [text, ...]]` (id > 0). Its answer: `[id, vectors, null]` (float32,
  little-endian, one row of `DIMENSION` a text, in order), or `[id, null, "why"]`.

Requests are answered one at a time, in order. The worker ends when the daemon closes its side
(also when the daemon is killed: the socket closes with it).
"""

from __future__ import annotations

import argparse
import socket
import struct
from pathlib import Path
from typing import Any

import msgspec

HEADER = struct.Struct("<I")
READY = 0
"""The id of the worker's first frame."""


def frame(payload: list[Any]) -> bytes:
    """One frame: its length, then `payload` as msgpack."""
    body = msgspec.msgpack.encode(payload)
    return HEADER.pack(len(body)) + body


def take_frame(buffer: bytearray) -> list[Any] | None:
    """The first whole frame in `buffer`, removed from it (None: not all of it has come yet)."""
    if len(buffer) < HEADER.size:
        return None
    (length,) = HEADER.unpack_from(buffer)
    end = HEADER.size + length
    if len(buffer) < end:
        return None
    payload = msgspec.msgpack.decode(bytes(buffer[HEADER.size : end]), type=list[Any])
    del buffer[:end]
    return payload


def serve(sock: socket.socket, cache: Path | None) -> None:
    """Load the model, say so, then answer requests until the other side closes."""
    from recalld.providers.duplicates_model import TitleModelProvider

    model = TitleModelProvider(cache)
    try:
        model.load()
    except Exception as exc:  # the package missing, or its files damaged: the daemon says why
        sock.sendall(frame([READY, None, f"title model failed to load: {exc!r}"]))
        return
    sock.sendall(frame([READY, None, None]))
    buffer = bytearray()
    while True:
        request = take_frame(buffer)
        if request is None:
            received = sock.recv(1 << 16)
            if not received:
                return  # the daemon closed its side
            buffer += received
            continue
        ident, texts = request
        try:
            vectors = model.encode(texts).astype("<f4", copy=False).tobytes()
        except Exception as exc:  # one bad request fails alone; the worker goes on
            sock.sendall(frame([ident, None, f"title model failed: {exc!r}"]))
            continue
        sock.sendall(frame([ident, vectors, None]))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m recalld.providers.title_worker")
    parser.add_argument("--fd", type=int, required=True, help="the connected Unix socket to serve")
    parser.add_argument("--cache", type=Path, help="the title model's cache directory")
    args = parser.parse_args()
    with socket.socket(fileno=args.fd) as sock:
        try:
            serve(sock, args.cache)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon went away mid-answer: nothing is left to answer


if __name__ == "__main__":
    main()
