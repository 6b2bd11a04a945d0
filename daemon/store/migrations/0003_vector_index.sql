-- The vector index's durable side: chunks and their surrogates, stored vectors per space,
-- verified generations and the pointer to the current one.

-- Every record change takes the next value, so "all changes up to W are reflected" is one number.
CREATE SEQUENCE record_change_seq AS bigint;
ALTER TABLE records ADD COLUMN change_seq bigint NOT NULL DEFAULT nextval('record_change_seq');
CREATE INDEX records_change_seq ON records (change_seq);

CREATE TABLE vector_spaces (
    space_id   text PRIMARY KEY,
    spec       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The id map. FAISS sees only `surrogate`: server-assigned from a sequence, unique, never reused
-- (a sequence never hands a value out twice, and rows are never re-keyed).
CREATE TABLE chunks (
    surrogate   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    record_id   uuid NOT NULL REFERENCES records (id),
    revision    integer NOT NULL,
    chunker     text NOT NULL,
    chunk_no    integer NOT NULL CHECK (chunk_no >= 0),
    namespace   text NOT NULL,
    text        text NOT NULL,
    text_sha256 text NOT NULL,
    -- set in the same transaction as the update or forget that made this chunk stale; the
    -- text is cleared then, so forgotten text does not linger here
    retired_at  timestamptz,
    UNIQUE (record_id, revision, chunker, chunk_no)
);
CREATE INDEX chunks_live_record ON chunks (record_id) WHERE retired_at IS NULL;
CREATE INDEX chunks_retired ON chunks (surrogate) WHERE retired_at IS NOT NULL;

-- Every vector, durably, per space: rebuilding or compacting an unchanged space never re-embeds.
CREATE TABLE chunk_vectors (
    space_id  text NOT NULL REFERENCES vector_spaces (space_id),
    surrogate bigint NOT NULL REFERENCES chunks (surrogate) ON DELETE CASCADE,
    vector    bytea NOT NULL,  -- float32, little-endian, `dimension` values
    PRIMARY KEY (space_id, surrogate)
);

-- Which revision of each record has its vectors stored in a space (and cut by which chunker):
-- "what still needs embedding" is then one indexed lookup per record, whatever the table sizes.
CREATE TABLE indexed_records (
    space_id  text NOT NULL REFERENCES vector_spaces (space_id),
    record_id uuid NOT NULL REFERENCES records (id),
    revision  integer NOT NULL,
    chunker   text NOT NULL,
    PRIMARY KEY (space_id, record_id)
);

CREATE TABLE generations (
    id                  text PRIMARY KEY,
    space_id            text NOT NULL REFERENCES vector_spaces (space_id),
    directory           text NOT NULL,
    manifest_sha256     text NOT NULL,
    index_type          text NOT NULL,
    count               bigint NOT NULL CHECK (count >= 0),
    source_watermark    bigint NOT NULL,
    tombstone_watermark bigint NOT NULL,
    state               text NOT NULL DEFAULT 'verified' CHECK (state IN ('verified', 'deleted')),
    built_at            timestamptz NOT NULL DEFAULT now(),
    activated_at        timestamptz,
    deactivated_at      timestamptz
);

-- One row: the current generation, the one before it (the rollback target) and a version for
-- compare-and-swap, so two builders can never both move it from the same state.
CREATE TABLE generation_pointer (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    current   text REFERENCES generations (id),
    previous  text REFERENCES generations (id),
    version   bigint NOT NULL DEFAULT 0,
    moved_at  timestamptz
);
INSERT INTO generation_pointer (singleton) VALUES (true);
