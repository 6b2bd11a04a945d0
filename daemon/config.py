"""recalld's configuration: one TOML file, overridable by environment, checked at start.

Every default lives here and only here, but for the settings an actor reads: those are the
actor's (`EmbedderSettings`, `IndexSettings`), and the sections here take them from there, since
`actors` cannot import `daemon` (tests/test_settings_from_config.py holds each section to its settings).
`config/recalld.toml` documents the same values; a test keeps the two in step. Loading is pure
apart from reading the file: it returns a frozen `Config` or raises `ConfigError` whose message
names the offending field path.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

from recalld.actors.embedding.settings import EmbedderSettings
from recalld.actors.embedding.template import TEMPLATES
from recalld.actors.index.settings import defaults as index_defaults
from recalld.resolver_env import resolver_aliases

ENV_PREFIX = "RECALLD_"
# Every RECALLD_ variable that is not a config key: the CLI's socket (daemon/paths.py) and the
# config file's path. Any other RECALLD_ name must be a config key, so that a misspelling is an
# error at start rather than a setting silently not made.
CLI_ENV = frozenset({"RECALLD_SOCKET", "RECALLD_CONFIG"})

PositiveFloat = Annotated[float, Meta(gt=0)]
Seconds = Annotated[float, Meta(gt=0, le=86_400)]
Port = Annotated[int, Meta(ge=0, le=65_535)]

# The actors' own defaults, which `[embedding]` and `[index]` take rather than restate.
_EMBEDDER = EmbedderSettings()
_INDEX = index_defaults()


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    pass


class ServerConfig(_Section, frozen=True):
    socket: str = ""
    """Unix socket path; empty picks $RUNTIME_DIRECTORY, $XDG_RUNTIME_DIR or /run/recalld."""
    socket_mode: Annotated[int, Meta(ge=0, le=0o777)] = 0o660
    tcp_host: str = ""
    """Empty: no TCP listener. TCP carries no peer credentials, so it is admin-less."""
    tcp_port: Port = 0
    shutdown_grace_s: Seconds = 10.0
    max_body_bytes: Annotated[int, Meta(ge=1024, le=256 * 1024 * 1024)] = 8 * 1024 * 1024
    body_timeout_s: Seconds = 30.0
    """A request body that has not fully arrived after this long answers 408 `body_timeout`."""
    idle_timeout_s: Annotated[float, Meta(ge=1, le=86_400)] = 75.0
    """A connection with no request in progress (idle between requests, or never finishing its
    request line and headers) is closed after this long, so stalled clients cannot hold
    connections (file descriptors) for good. Longer than the idle expiry of common client pools
    (httpx 5 s, aiohttp 15 s), so they never send into a connection being closed."""
    backlog: Annotated[int, Meta(ge=1, le=65_535)] = 1024
    """Connections the kernel queues for the daemon while it is busy (and while it starts); past
    it a client's connect fails at once with EAGAIN. Capped by net.core.somaxconn (logged)."""
    rejected_log_per_s: Annotated[int, Meta(ge=1, le=10_000)] = 10
    """Malformed requests (refused before any handler or access check) log one line each, at
    most this many lines a second; the rest are counted in a line once the second is over."""


class StoreConfig(_Section, frozen=True):
    dsn: str = ""
    """Empty: start and own an embedded PostgreSQL under the data directory. May name several
    hosts (libpq's syntax); every connection goes to the one that takes writes
    (`recalld.store.dsn.writable_dsn`)."""
    data_dir: str = ""
    """Empty: $STATE_DIRECTORY, $XDG_STATE_HOME/recalld or /var/lib/recalld for root."""
    pool_min: Annotated[int, Meta(ge=1, le=100)] = 1
    pool_max: Annotated[int, Meta(ge=1, le=200)] = 10
    connect_timeout_s: Seconds = 5.0
    statement_timeout_s: Seconds = 60.0
    """How long one statement of the daemon's pool may run before the request that sent it answers
    503 `store_unavailable` (PostgreSQL itself ends the statement 1 s later). Migrations are not
    bound by it: they take as long as they take."""
    health_timeout_s: Seconds = 2.0
    shared_buffers_mb: Annotated[int, Meta(ge=0, le=1_048_576)] = 0
    """The embedded server's shared_buffers; 0: an eighth of the memory, 128 MB to 1 GB."""


class EmbeddingConfig(_Section, frozen=True):
    provider: Literal["local", "ollama", "openai", "none"] = "local"
    url: str = ""
    model: str = ""
    """Empty: the provider's default (the local model: all-MiniLM-L6-v2)."""
    api_key: str = ""
    timeout_s: Seconds = _EMBEDDER.timeout_s
    max_batch: Annotated[int, Meta(ge=1, le=4096)] = _EMBEDDER.max_batch
    max_wait_ms: Annotated[float, Meta(ge=0, le=10_000)] = _EMBEDDER.max_wait_s * 1000.0
    bulk_call_ms: Annotated[float, Meta(gt=0, le=600_000)] = _EMBEDDER.bulk_call_s * 1000.0
    """Indexing's provider calls are sized to cost about this long (from the provider's recent
    speed), so a query, served first, waits behind at most one such call."""
    rate_per_s: Annotated[float, Meta(ge=0)] = _EMBEDDER.rate_per_s
    """Provider calls per second; 0 means unlimited."""
    breaker_failures: Annotated[int, Meta(ge=1, le=1000)] = _EMBEDDER.breaker_failures
    breaker_reset_s: Seconds = _EMBEDDER.breaker_reset_s
    template_version: Annotated[int, Meta(ge=1)] = _EMBEDDER.template_version
    # bounded, so never inf: at most a million units per 1,000 tokens
    prices: dict[str, Annotated[float, Meta(ge=0, le=1e12)]] = {}
    """Model name -> cost in micro-units per 1,000 input tokens; a model not listed costs 0."""


class RecallConfig(_Section, frozen=True):
    default_k: Annotated[int, Meta(ge=1, le=1000)] = 10
    max_k: Annotated[int, Meta(ge=1, le=1000)] = 200
    default_deadline_ms: Annotated[int, Meta(ge=1, le=120_000)] = 5_000
    max_deadline_ms: Annotated[int, Meta(ge=1, le=600_000)] = 60_000
    max_query_chars: Annotated[int, Meta(ge=1, le=1_000_000)] = 4096
    """A longer query is refused (400, naming this key): it would only cost parsing and embedding."""
    max_filter_kinds: Annotated[int, Meta(ge=1, le=100_000)] = 100
    """Kinds in one recall's `kinds` filter (500,000 cost 1.7 s of CPU before this limit)."""
    fts_candidates: Annotated[int, Meta(ge=1, le=10_000)] = 30
    """Candidates the full-text route hands to fusion (at least k). Fused quality on the golden
    set is the same at 20, 30, 50 and 100 (docs/RETRIEVAL.md); fewer cost less."""
    snippet_words: Annotated[int, Meta(ge=3, le=200)] = 30
    fusion: Literal["rrf", "weighted"] = "rrf"
    """Fusion method when a request names none: reciprocal-rank (`rrf`) or min-max normalised
    score sum (`weighted`). Chosen by bench/retrieval.py; see docs/RETRIEVAL.md."""
    rrf_k: Annotated[float, Meta(gt=0, le=1000)] = 30.0
    """RRF's k: a candidate at rank r adds weight / (k + r). Smaller k trusts each route's top more."""
    weights: dict[Literal["fts", "vector", "structured"], Annotated[float, Meta(ge=0, le=100)]] = msgspec.field(
        default_factory=lambda: {"fts": 1.0, "vector": 1.0, "structured": 0.5}
    )
    """Route weights for weighted fusion (and for RRF, each route's reciprocal ranks)."""
    fts_evidence_weights: dict[Literal["exact", "all_terms", "some_terms"], Annotated[float, Meta(ge=0, le=100)]] = (
        msgspec.field(default_factory=lambda: {"exact": 2.0, "all_terms": 0.03, "some_terms": 0.03})
    )
    """Factor on a full-text candidate's weight by what it matched: `exact` (every term of a query
    naming identifiers such as options, settings or error codes, or the whole query word for
    word), `all_terms` (every word of a plain question) or `some_terms`. Plain words on long
    pages are weak evidence next to the vector route: below 1 / (rrf_k + 2) they cannot lift a
    record above the vector route's first answer on their own. A level not named weighs 1."""
    thresholds: dict[Literal["vector"], Annotated[float, Meta(ge=-1, le=1)]] = {}
    """The least score a route's candidate must reach to be one (a request's `thresholds` take
    precedence). `vector`: cosine similarity of the query and the record's best chunk, inclusive.
    Empty by default: with the local model, the highest floor that loses no answer on the golden
    sets (0.30) leaves 91% of off-topic questions a vector answer (docs/RETRIEVAL.md,
    "Thresholds"). A floor suits a client that would rather have nothing from the vector route
    than something far; it depends on the model."""
    vector_candidates: Annotated[int, Meta(ge=1, le=10_000)] = 30
    """Records the vector route hands to fusion (at least k); as `fts_candidates`."""
    structured_candidates: Annotated[int, Meta(ge=1, le=10_000)] = 30
    """Records the structured route hands to fusion (at least k): the most recently changed that
    match the kind and attribute filters."""
    overfetch_rounds: Annotated[int, Meta(ge=0, le=10)] = 3
    """How often the vector route may search again, 4x deeper, when filters or rehydration
    left fewer than k results."""
    exact_filter_max_records: Annotated[int, Meta(ge=0, le=100_000)] = 1000
    """Kind and attribute filters that at most this many records pass (or the vector route's
    candidate cap, if larger) make the vector route score just those records, exactly: however far
    they lie from the query, the best k of them come back. Broader filters are left to the index
    walk and the over-fetch. Reading the records costs 1–2 ms per 1,000 (docs/RETRIEVAL.md,
    "Filters"). 0: never."""
    partial_weight: Annotated[float, Meta(ge=0, le=1)] = 0.5
    """While a namespace is still being indexed the vector route answers from part of it
    (`vector_indexing`): its fusion weight is multiplied by this, and full-text evidence counts
    at least 1, so a half-built vector route does not crowd out what full text found."""
    query_cache: Annotated[int, Meta(ge=0, le=1_000_000)] = 1024
    """Query vectors kept for repeated queries (least recently used go first); 0 turns it off.
    About 1.6 KB each at 384 dimensions."""
    vector_required: bool = False
    """True: not ready while the embedding provider or a verified generation is missing."""
    route_deadline_ms: dict[Literal["fts", "vector", "structured"], Annotated[int, Meta(ge=1, le=600_000)]] = {}
    """A route's own time limit inside the request's deadline (the sooner of the two applies);
    a route not named here has the request's whole deadline."""
    fts_waits_for_embedding: Literal["auto", "always", "never"] = "auto"
    """Whether full text starts only once the vector route has its query vector (or has given up
    on it), at most `fts_embedding_wait_ms` later: `auto` when the query is embedded in this
    process (the local model), whose run takes every core, so a full-text statement beside it
    only slows it down; a remote provider's wait costs this machine nothing, so full text runs
    beside it. Measured on 2 cores: 0.3-0.5 ms less per one-client recall (bench/recall_probe.py,
    bench/NOTES.md)."""
    fts_embedding_wait_ms: Annotated[int, Meta(ge=0, le=60_000)] = 50
    """The longest full text waits for the query's embedding: a short query takes the local model
    about 5 ms on 2 cores and a 256-token one about 30; beyond this the routes run side by side,
    so a slow embedding never costs full text its answer. It counts toward full text's own
    `route_deadline_ms`."""


class IndexConfig(_Section, frozen=True):
    directory: str = ""
    """Where generations live; empty: <data_dir>/generations. Daemons sharing one PostgreSQL may each
    have their own (each copies every generation from the stored vectors) or share one on a host."""
    factory: Annotated[str, Meta(pattern=r"^(auto|Flat|HNSW[0-9]+)$")] = _INDEX.factory
    """FAISS index type of new generations: `auto` (Flat, exact, for a small generation; `AUTO_HNSW`
    from `AUTO_HNSW_FROM` vectors, actors/index/settings.py), `Flat` or `HNSW<M>`."""
    compact_share: Annotated[float, Meta(gt=0, le=10)] = _INDEX.compact_share
    """Build a new generation when the delta holds more than this share of the base."""
    chunk_chars: Annotated[int, Meta(ge=100, le=100_000)] = _INDEX.chunk_chars
    chunk_overlap: Annotated[int, Meta(ge=0, le=10_000)] = _INDEX.chunk_overlap
    index_batch: Annotated[int, Meta(ge=1, le=1000)] = _INDEX.index_batch
    poll_s: Seconds = _INDEX.poll_s
    recheck_s: Seconds = _INDEX.recheck_s
    """Once every record is indexed, polls read only records changed since, and all of them this often."""
    hold_s: Seconds = _INDEX.hold_s
    """A record the provider will not embed waits this long before it is tried again (doubling, at most a day)."""
    hnsw_ef_search: Annotated[int, Meta(ge=1, le=10_000)] = _INDEX.hnsw_ef_search
    """The beam of an HNSW search (at least the hits it asks for): wider finds more of the exact
    top k and costs more; applies to every generation, whatever its file stored."""


class GcConfig(_Section, frozen=True):
    interval_s: Seconds = 60.0
    rollback_window_s: Annotated[float, Meta(ge=0)] = 3600.0
    """The previous generation is kept at least this long after it stopped being current."""
    temp_grace_s: Annotated[float, Meta(ge=0)] = 3600.0
    """Build directories left by a crash are removed once this old."""
    search_retention_days: Annotated[float, Meta(gt=0, le=36_500)] = 30.0
    dispute_retention_days: Annotated[float, Meta(gt=0, le=36_500)] = 90.0
    """Disputes finished (resolved, superseded, skipped) longer ago than this are deleted; one
    whose tie comes back later is asked afresh. Pending and moderated ones are kept."""


class RecordsConfig(_Section, frozen=True):
    max_title_chars: Annotated[int, Meta(ge=1, le=100_000)] = 1_000
    max_body_chars: Annotated[int, Meta(ge=1, le=64 * 1024 * 1024)] = 4 * 1024 * 1024
    max_namespace_chars: Annotated[int, Meta(ge=1, le=1_000)] = 128
    max_kind_chars: Annotated[int, Meta(ge=1, le=1_000)] = 64
    max_attributes: Annotated[int, Meta(ge=1, le=1_000_000)] = 1_000
    """Values in a record's attributes (or a recall's attribute filter), nested ones counted."""
    max_attributes_bytes: Annotated[int, Meta(ge=64, le=64 * 1024 * 1024)] = 256 * 1024
    """The size of those attributes as JSON."""
    max_batch: Annotated[int, Meta(ge=1, le=100_000)] = 1_000
    """Records in one `POST /v1/records:batch` (the body's size is bounded by `[server]
    max_body_bytes` too)."""


class DuplicatesConfig(_Section, frozen=True):
    """Semantic duplicate warnings on create (docs/DUPLICATES.md)."""

    enabled: bool = True
    """false: no check runs, no title is embedded or stored, and no title model is loaded; every
    write's `duplicate_check` is `skipped` with reason `disabled`, and the audit answers 503."""
    model: Literal["auto", "embedding", "use-multilingual-v3"] = "auto"
    """What embeds titles: `use-multilingual-v3`, the multilingual title model shipped with
    recalld (it separates duplicates better, across languages too); `embedding`, the
    `[embedding]` provider; `auto`, the title model when that provider is `local` (the English
    recall model) and the provider otherwise (a configured model may be multilingual already)."""
    threshold: Annotated[float, Meta(ge=-1, le=1)] = 0.80
    """The least title similarity that warns (inclusive) for a model not in `thresholds`: the
    usual starting point for sentence-embedding models, not a measurement."""
    thresholds: dict[str, Annotated[float, Meta(ge=-1, le=1)]] = msgspec.field(
        default_factory=lambda: {"use-multilingual-v3": 0.501, "all-MiniLM-L6-v2-onnx-int8": 0.489}
    )
    """Embedding model -> its threshold, chosen with `recalld calibrate` on
    tests/fixtures/duplicates/pairs.json (docs/DUPLICATES.md has the figures)."""
    time_cap_s: Seconds = 10.0
    """The whole check (embedding the title, reading and comparing the titles) must end within
    this, or it is skipped with `time_cap_exceeded`: the record is written either way."""
    max_similar: Annotated[int, Meta(ge=1, le=1000)] = 10
    """At most this many similar records are named in a warning, the most similar first."""
    catch_up_titles: Annotated[int, Meta(ge=0, le=4096)] = 31
    """Live titles with no stored vector yet (written a moment ago: the index manager embeds
    them a little later) that a check embeds in its own embedding call, the newest first, and
    stores. The call never carries more than `[embedding] max_batch` texts (32) because of
    them, so that a check stays one provider call; titles beyond are counted in `of`, not in
    `compared`, and the index manager is woken to embed them."""
    unchecked_kinds: list[str] = msgspec.field(default_factory=lambda: ["doc"])
    """Kinds whose records are neither checked nor compared with: their checks are `skipped`
    with `kind_not_checked`, and `recalld dupes` leaves them out. `doc` is the kind `recalld
    ingest` writes: a title made from a file's name or first heading says little about what
    the file holds. Empty: every kind is checked."""
    contrast_penalty: Annotated[float, Meta(ge=0, le=2)] = 0.25
    """The lexical second stage: a pair of titles that share at least two content words, and at
    least as many as they differ in on either side, and differ in at most `contrast_slot_words`
    ("... report to CSV" / "... report to PDF") must score this much higher to warn; 0 turns the
    stage off."""
    contrast_slot_words: Annotated[int, Meta(ge=1, le=20)] = 3
    contrast_numbers: bool = True
    """The contrast stage also takes the penalty from a pair whose titles each name a number
    and share none ("Error 500 ..." / "Error 404 ...", "... Android 14" / "... iOS 17"), in any
    language; chosen on the calibration pairs (docs/DUPLICATES.md)."""
    cross_language_penalties: dict[str, Annotated[float, Meta(ge=0, le=2)]] = msgspec.field(
        default_factory=lambda: {"use-multilingual-v3": 0.18}
    )
    """Embedding model -> its cross-language penalty: a pair of titles in different languages
    (one English, one not) must score this much higher to warn, and the frame contrast does not
    apply to it (the number contrast does). A model not listed has none. Chosen on the
    calibration pairs (docs/DUPLICATES.md): a multilingual model scores neighbours across
    languages higher than neighbours within one."""


class ResolverConfig(_Section, frozen=True):
    """The LLM resolver of disputes (docs/DESIGN.md, "Canonical assignments"). Also read from the
    variables ASSIGNMENT_RESOLVER_ENABLED, _TICK_INTERVAL, _MAX_LLM_ATTEMPTS, _LLM_MODEL and _LLM_TIMEOUT
    (durations such as "15m" or "180s"); RECALLD_RESOLVER_* wins where both are set."""

    enabled: bool = False
    """False: the resolver ticker is not started and disputes wait in `pending`."""
    url: str = ""
    """An OpenAI-compatible base URL (ending in /v1); the resolver POSTs {url}/chat/completions."""
    model: str = ""
    api_key: str = ""
    interval_s: Seconds = 900.0
    timeout_s: Seconds = 180.0
    """The deadline of one LLM call."""
    max_attempts: Annotated[int, Meta(ge=1, le=100)] = 1
    """LLM calls a dispute gets (one per tick) before it goes to moderation as attempts_exhausted."""
    batch: Annotated[int, Meta(ge=1, le=10_000)] = 50
    """Disputes one tick takes."""
    breaker_failures: Annotated[int, Meta(ge=1, le=1000)] = 3
    """Consecutive failed calls that open the circuit: no call until a probe after breaker_reset_s."""
    breaker_reset_s: Seconds = 60.0


class AssignmentsConfig(_Section, frozen=True):
    interval_s: Seconds = 60.0
    """How often the strategy chain runs over the characteristics observed since its last run."""


class AccessConfig(_Section, frozen=True):
    """Who may use the socket, by peer credentials (SO_PEERCRED).

    The daemon's own uid and root are always admins. `readers`/`writers` map a uid or group
    name (as a string, e.g. "1000" or "@staff") to the namespaces it may use ("*" = all).
    """

    admins: list[str] = []
    readers: dict[str, list[str]] = {}
    writers: dict[str, list[str]] = {}


class LogConfig(_Section, frozen=True):
    level: Literal["debug", "info", "warning", "error"] = "info"


class Config(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    server: ServerConfig = ServerConfig()
    store: StoreConfig = StoreConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    recall: RecallConfig = RecallConfig()
    records: RecordsConfig = RecordsConfig()
    duplicates: DuplicatesConfig = DuplicatesConfig()
    index: IndexConfig = IndexConfig()
    gc: GcConfig = GcConfig()
    resolver: ResolverConfig = ResolverConfig()
    assignments: AssignmentsConfig = AssignmentsConfig()
    access: AccessConfig = AccessConfig()
    log: LogConfig = LogConfig()


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the field path."""


def _sections() -> dict[str, type[msgspec.Struct]]:
    return {f.name: f.type for f in msgspec.structs.fields(Config)}


def env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Collect `RECALLD_<SECTION>_<KEY>` variables as raw strings, refusing unknown sections and
    keys as the file's are refused (only the names in CLI_ENV are not config)."""
    sections = _sections()
    out: dict[str, dict[str, str]] = {}
    for name, value in environ.items():
        if not name.startswith(ENV_PREFIX) or name in CLI_ENV:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section, _, key = rest.partition("_")  # sections are single words
        if section not in sections:
            raise ConfigError(
                f"unknown environment variable {name}: {section!r} is no config section"
                f" (sections: {', '.join(sections)}; other variables: {', '.join(sorted(CLI_ENV))})"
            )
        known = [f.name for f in msgspec.structs.fields(sections[section])]
        if key not in known:
            raise ConfigError(
                f"unknown config key from environment {name}: [{section}] has no {key!r} (keys: {', '.join(known)})"
            )
        out.setdefault(section, {})[key] = value
    return out


def _coerce_env(section: str, key: str, raw: str) -> Any:
    """Turn an environment string into the field's type (lists and tables as TOML values)."""
    field = next(f for f in msgspec.structs.fields(_sections()[section]) if f.name == key)
    origin = getattr(field.type, "__origin__", None)
    if field.type in (list, dict) or origin in (list, dict):
        try:
            return tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"RECALLD_{section.upper()}_{key.upper()}: not a TOML value: {exc}") from exc
    return raw


def build(document: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Config:
    """Merge a parsed TOML document with environment overrides and validate the result."""
    merged: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in document.items()}
    overrides = env_overrides(environ or {})
    for key, raw in resolver_aliases(environ or {}).items():
        overrides.setdefault("resolver", {}).setdefault(key, raw)  # RECALLD_RESOLVER_* wins
    for section, keys in overrides.items():
        target = merged.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"[{section}] must be a table")
        for key, raw in keys.items():
            target[key] = _coerce_env(section, key, raw)
    try:
        # strict=False lets "30" from the environment become 30.0 and "true" become True.
        config = msgspec.convert(merged, Config, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid configuration: {exc}") from exc
    if config.store.pool_min > config.store.pool_max:
        raise ConfigError("invalid configuration: store.pool_min is larger than store.pool_max")
    if config.index.chunk_overlap >= config.index.chunk_chars:
        raise ConfigError("invalid configuration: index.chunk_overlap must be smaller than index.chunk_chars")
    if config.recall.default_k > config.recall.max_k:
        raise ConfigError("invalid configuration: recall.default_k is larger than recall.max_k")
    if config.embedding.template_version not in TEMPLATES:
        raise ConfigError(
            f"invalid configuration: embedding.template_version {config.embedding.template_version} is unknown"
            f" (known: {sorted(TEMPLATES)})"
        )
    if config.resolver.enabled and not config.resolver.url.startswith(("http://", "https://")):
        raise ConfigError(
            "invalid configuration: resolver.url must be an http(s) URL (an OpenAI-compatible base ending"
            f" in /v1) when resolver.enabled is true; it is {config.resolver.url!r}"
        )
    return config


def load(path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read the TOML file at `path` (none: defaults only) and apply `environ` overrides."""
    document: dict[str, Any] = {}
    if path is not None:
        try:
            document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"config file not found: {path}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {path} is not UTF-8 text: {exc}") from exc
        except OSError as exc:  # a directory, no permission
            raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from exc
    return build(document, os.environ if environ is None else environ)


def to_toml_defaults() -> dict[str, dict[str, Any]]:
    """The default values as plain data (used to check config/recalld.toml stays true)."""
    defaults: dict[str, dict[str, Any]] = msgspec.to_builtins(Config())
    return defaults
