"""The id map of a vector set: which record, revision and namespace each surrogate stands for.

FAISS only ever sees surrogates (server-assigned int64, unique, never reused); the id map turns
them back into public ids. Saved as an uncompressed, pickle-free `.npz` covered by the manifest.
"""

from __future__ import annotations

import uuid
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Surrogates = npt.NDArray[np.int64]
RecordIds = npt.NDArray[np.uint8]
"""Record UUIDs as rows of 16 bytes, as an id map holds them."""
_ID_MAP_ARRAYS = frozenset({"surrogate", "record_id", "revision", "namespace_code", "namespaces"})


def record_id_rows(record_ids: Sequence[uuid.UUID]) -> RecordIds:
    return np.frombuffer(b"".join(r.bytes for r in record_ids), dtype=np.uint8).reshape(-1, 16)


class IdMap:
    """Row i describes vector i: its surrogate, record UUID, revision and namespace. Immutable.

    Arrays are read-only numpy arrays of equal length: `surrogate` int64 (unique), `record_id`
    uint8 (n, 16) (UUID bytes), `revision` int32, `namespace_code` int32 indexing `namespaces`.
    """

    __slots__ = ("namespace_code", "namespaces", "record_id", "revision", "surrogate")

    surrogate: Surrogates
    record_id: npt.NDArray[np.uint8]
    revision: npt.NDArray[np.int32]
    namespace_code: npt.NDArray[np.int32]
    namespaces: tuple[str, ...]

    def __init__(
        self,
        surrogate: npt.ArrayLike,
        record_id: npt.ArrayLike,
        revision: npt.ArrayLike,
        namespace_code: npt.ArrayLike,
        namespaces: Sequence[str],
    ) -> None:
        arrays = {
            "surrogate": frozen_array(surrogate, np.int64),
            "record_id": frozen_array(record_id, np.uint8).reshape(-1, 16),
            "revision": frozen_array(revision, np.int32),
            "namespace_code": frozen_array(namespace_code, np.int32),
        }
        n = len(arrays["surrogate"])
        if any(a.ndim != (2 if name == "record_id" else 1) or len(a) != n for name, a in arrays.items()):
            raise ValueError("id map arrays must all have one row per vector")
        names = tuple(str(ns) for ns in namespaces)
        codes = arrays["namespace_code"]
        if n and (codes.min() < 0 or codes.max() >= len(names)):
            raise ValueError("namespace codes out of range")
        for name, array in arrays.items():
            object.__setattr__(self, name, array)
        object.__setattr__(self, "namespaces", names)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("IdMap is immutable")

    @classmethod
    def from_rows(
        cls,
        surrogates: Sequence[int] | Surrogates,
        record_ids: Sequence[uuid.UUID],
        revisions: Sequence[int] | npt.NDArray[np.integer[Any]],
        namespaces: Sequence[str],
    ) -> IdMap:
        """An id map from per-row values (namespaces as strings, one per row)."""
        names = sorted(set(namespaces))
        code_of = {name: i for i, name in enumerate(names)}
        return cls(
            np.asarray(surrogates, dtype=np.int64),
            record_id_rows(record_ids),
            np.asarray(revisions, dtype=np.int32),
            np.fromiter((code_of[ns] for ns in namespaces), dtype=np.int32, count=len(namespaces)),
            names,
        )

    @classmethod
    def empty(cls) -> IdMap:
        return cls(np.empty(0, np.int64), np.empty((0, 16), np.uint8), np.empty(0, np.int32), np.empty(0, np.int32), ())

    def __len__(self) -> int:
        return len(self.surrogate)

    def record_uuid(self, row: int) -> uuid.UUID:
        return uuid.UUID(bytes=self.record_id[row].tobytes())

    def namespace(self, row: int) -> str:
        return self.namespaces[int(self.namespace_code[row])]

    def take(self, rows: npt.NDArray[np.integer[Any]]) -> IdMap:
        """The given rows, in the given order (namespaces keep their codes)."""
        return IdMap(
            self.surrogate[rows], self.record_id[rows], self.revision[rows], self.namespace_code[rows], self.namespaces
        )

    def concat(self, other: IdMap) -> IdMap:
        """This map's rows followed by `other`'s."""
        names = sorted(set(self.namespaces) | set(other.namespaces))
        code_of = {name: i for i, name in enumerate(names)}

        def recode(m: IdMap) -> npt.NDArray[np.int32]:
            table = np.array([code_of[ns] for ns in m.namespaces] or [0], dtype=np.int32)
            return table[m.namespace_code]

        return IdMap(
            np.concatenate([self.surrogate, other.surrogate]),
            np.concatenate([self.record_id, other.record_id]),
            np.concatenate([self.revision, other.revision]),
            np.concatenate([recode(self), recode(other)]),
            names,
        )

    def save(self, path: Path) -> None:
        """Write an uncompressed `.npz` (no pickles), so that loading it allocates nothing unchecked."""
        with open(path, "wb") as f:
            np.savez(
                f,
                surrogate=self.surrogate,
                record_id=self.record_id,
                revision=self.revision,
                namespace_code=self.namespace_code,
                namespaces=np.array(self.namespaces, dtype=str),
            )

    @classmethod
    def load(cls, path: Path) -> IdMap:
        """Read what `save` wrote; ValueError (or a zipfile/OS error) for anything else."""
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            names = {info.filename.removesuffix(".npy") for info in infos}
            if names != _ID_MAP_ARRAYS or len(infos) != len(_ID_MAP_ARRAYS):
                raise ValueError(f"id map holds {sorted(names)}")
            for info in infos:
                # Stored, not deflated: a member can never expand beyond the checked file.
                if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
                    raise ValueError(f"id map member {info.filename} is compressed or oversized")
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in _ID_MAP_ARRAYS}
        for name, kind in (("surrogate", "i"), ("record_id", "u"), ("revision", "i"), ("namespace_code", "i")):
            if arrays[name].dtype.kind != kind:
                raise ValueError(f"id map {name} has dtype {arrays[name].dtype}")
        if arrays["namespaces"].dtype.kind != "U" or arrays["namespaces"].ndim != 1:
            raise ValueError("id map namespaces are not strings")
        return cls(
            arrays["surrogate"],
            arrays["record_id"],
            arrays["revision"],
            arrays["namespace_code"],
            [str(ns) for ns in arrays["namespaces"]],
        )


def frozen_array(values: npt.ArrayLike, dtype: type[np.generic]) -> npt.NDArray[Any]:
    array = np.array(values, dtype=dtype, copy=True)
    array.setflags(write=False)
    return array
