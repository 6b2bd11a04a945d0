-- Records: the canonical store. One row per record; `revision` counts changes.
-- A forget sets `deleted_at` (the tombstone); no route may return such a row again.
CREATE TABLE records (
    id           uuid PRIMARY KEY,
    namespace    text NOT NULL,
    kind         text NOT NULL,
    title        text NOT NULL,
    -- case, whitespace and punctuation folded (actors.records.normalise_title)
    title_norm   text NOT NULL,
    body         text NOT NULL,
    attributes   jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(attributes) = 'object'),
    source_path  text,
    content_hash text NOT NULL,
    revision     integer NOT NULL DEFAULT 1 CHECK (revision >= 1),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    deleted_at   timestamptz,
    -- title weighs more than body; the text search configuration is fixed per schema
    search       tsvector GENERATED ALWAYS AS (
                     setweight(to_tsvector('english', title), 'A') ||
                     setweight(to_tsvector('english', body), 'B')) STORED
);

-- Exact duplicates: one live record per normalised title within a namespace and kind.
CREATE UNIQUE INDEX records_live_title ON records (namespace, kind, title_norm) WHERE deleted_at IS NULL;
CREATE INDEX records_search ON records USING gin (search);
CREATE INDEX records_live_namespace ON records (namespace, kind) WHERE deleted_at IS NULL;
CREATE INDEX records_source_path ON records (namespace, source_path) WHERE deleted_at IS NULL AND source_path IS NOT NULL;
CREATE INDEX records_attributes ON records USING gin (attributes jsonb_path_ops);

-- Search telemetry: one row per recall (what was asked, never the text itself).
CREATE TABLE searches (
    id              uuid PRIMARY KEY,
    namespace       text NOT NULL,
    query_hash      text NOT NULL,
    routes          text[] NOT NULL,
    fusion          jsonb NOT NULL,
    results         jsonb NOT NULL,
    timings_ms      jsonb NOT NULL,
    degraded_routes jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX searches_namespace_created ON searches (namespace, created_at);
