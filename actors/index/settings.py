"""The index manager's settings: the one place their defaults are written.

`daemon/config.py`'s `[index]` section takes its defaults from here (`defaults()`), and the
daemon builds the settings from its config with `IndexSettings.from_config`, so a default is
never restated (tests/test_settings_from_config.py holds the two to that). `actors` cannot
import `daemon`, hence this direction: the actor owns the meaning of its settings, the config
file exposes them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Protocol

from recalld.actors.index.placement import INLINE_MAX_S

HNSW_EF_SEARCH: Final = 200
"""The default beam width of an HNSW search (`[index] hnsw_ef_search`; wider when a search asks
for more hits); new generations store it too. Chosen by measured recall: on the 100k-passage
bench generation (HNSW32, 384 dimensions) recall@10 against exact search was 0.955 at 64, 0.972
at 128 and 0.987 at 200, for 0.34, 0.55 and 0.90 ms a search (bench/recall.py sweeps it)."""


AUTO: Final = "auto"
"""The default `[index] factory`: each generation is `Flat` below `AUTO_HNSW_FROM` vectors and
`AUTO_HNSW` from there (`factory_for`)."""

AUTO_HNSW: Final = "HNSW32"
"""The graph `auto` builds: M 32, as the benches of large corpora configure it."""

AUTO_HNSW_FROM: Final = 10_000
"""From this many vectors an `auto` generation is an HNSW graph. Chosen by bench/flat_or_hnsw.py
(figures in docs/BENCHMARKS.md, "Flat or HNSW"): a flat search grows with the vectors and costs
as much as an HNSW32 walk near 5,000 of them; below 10,000 the exact answer costs a fraction of
a millisecond more a search, so it is kept."""


def factory_for(factory: str, vectors: int, *, hnsw_from: int = AUTO_HNSW_FROM) -> str:
    """The FAISS factory of a new generation of `vectors` vectors: `factory` as configured; for
    `auto`, `AUTO_HNSW` from `hnsw_from` vectors on, else `Flat`."""
    if factory != AUTO:
        return factory
    return AUTO_HNSW if vectors >= hnsw_from else "Flat"


class IndexSettingsSource(Protocol):
    """The fields of `recalld.config.IndexConfig` the index manager reads (no import of daemon)."""

    @property
    def chunk_chars(self) -> int: ...
    @property
    def chunk_overlap(self) -> int: ...
    @property
    def factory(self) -> str: ...
    @property
    def compact_share(self) -> float: ...
    @property
    def index_batch(self) -> int: ...
    @property
    def poll_s(self) -> float: ...
    @property
    def recheck_s(self) -> float: ...
    @property
    def hold_s(self) -> float: ...
    @property
    def hnsw_ef_search(self) -> int: ...


CONFIGURED = (
    "chunk_chars",
    "chunk_overlap",
    "factory",
    "compact_share",
    "index_batch",
    "poll_s",
    "recheck_s",
    "hold_s",
    "hnsw_ef_search",
)
"""The settings `[index]` of the config file sets, each under its own name (`root` comes from
`[index] directory` and the data directory; the others are not configurable)."""


@dataclass(frozen=True)
class IndexSettings:
    root: Path
    """Where generation directories live: this daemon's own, or one shared by the daemons of a
    host; a generation not here is copied from the stored vectors (`actors/index/copies.py`)."""
    chunk_chars: int = 1000
    chunk_overlap: int = 150
    factory: str = AUTO
    """FAISS factory of new generations: `auto`, `Flat` or `HNSW<M>` (`factory_for`)."""
    compact_share: float = 0.2
    """Build a new generation when the delta holds more than this share of the base."""
    index_batch: int = 16
    """Records chunked and embedded per step of the catch-up."""
    poll_s: float = 2.0
    recheck_s: float = 60.0
    """Once every record is indexed, steps look only at records changed since; this often they
    read every live record again anyway."""
    hold_s: float = 600.0
    """A record the provider will not embed is tried again after this long, then after twice as
    long each time (at most a day); a new revision of it is tried at once."""
    hnsw_ef_search: int = HNSW_EF_SEARCH
    """The beam of every HNSW search, whatever the generation file stored: recall against speed."""
    delta_page: int = 5000
    quiet_s: float = 1.0
    """An automatic build waits until no change has arrived for this long (a burst of writes
    becomes one generation, not several)."""
    auto_hnsw_from: int = AUTO_HNSW_FROM
    """Where an `auto` factory turns to HNSW (`factory_for`). Not configurable (a deployment that
    wants otherwise names its factory); tests lower it, so a graph is built from a few vectors."""
    inline_search_max_s: float = INLINE_MAX_S
    """The longest an ordinary vector search may hold the event loop (`index/placement.py`). Not
    configurable; tests of where searches run raise it, so the machine's speed does not decide."""

    @property
    def chunker(self) -> str:
        """Names how chunks were cut: chunks of another chunker are other chunks."""
        return f"c1:{self.chunk_chars}:{self.chunk_overlap}"

    @classmethod
    def from_config(cls, config: IndexSettingsSource, *, root: Path) -> IndexSettings:
        return replace(cls(root=root), **{name: getattr(config, name) for name in CONFIGURED})


def defaults() -> IndexSettings:
    """The settings with every default: what `[index]` of the config file starts from."""
    return IndexSettings(root=Path())
